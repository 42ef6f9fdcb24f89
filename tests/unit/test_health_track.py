"""The bookkeeping every family's rule shares (`ray_accel.core.health_track`),
poll by poll: sticky faults, level faults ended by K clean readings,
unreadable polls that count toward nothing, a person's clear."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_accel.core.errors import InputError
from ray_accel.core.health import Health, HealthEvent
from ray_accel.core.health_track import (
    RECOVERY_POLLS_ENV,
    Fault,
    Findings,
    Level,
    Tracked,
    advance,
    clear_device,
    healthy_again,
    recovery_polls,
    start,
    step_all,
)
from tests.badinput import badinput

D = "neuron:1"
K = 3


def lost(t: Tracked) -> Fault:
    """The device's open "lost" fault."""
    return next(f for f in t.faults if f.kind == "lost")


def gone(at: float) -> Level:
    return Level("lost", HealthEvent(D, "lost", None, "device gone", at, True), "present")


PRESENT = Level("lost", None, "present")


def fatal(at: float, kind: str = "ecc", code: str = "mem_ecc_uncorrected") -> HealthEvent:
    return HealthEvent(D, kind, code, f"{code} grew", at, True)


def run(polls: list[Findings], k: int = K) -> list[Tracked]:
    """The device's state after each poll (poll n at time n)."""
    (t,) = start([D], 0.0)
    out = []
    for n, f in enumerate(polls, 1):
        t, _ = advance(t, f, float(n), k)
        out.append(t)
    return out


def clean() -> Findings:
    return Findings(D, vouched=("ecc",), levels=(PRESENT,))


def test_before_any_poll_every_device_is_unknown() -> None:
    assert [t.state for t in start(["a", "b"], 5.0)] == [Health.UNKNOWN] * 2


def test_a_clean_poll_is_healthy_only_with_a_source_that_vouches() -> None:
    states = run([clean(), Findings(D, levels=(PRESENT,)), Findings(D)])
    assert [t.state for t in states] == [Health.HEALTHY, Health.UNKNOWN, Health.UNKNOWN]


def test_a_fatal_event_is_sticky_whatever_follows() -> None:
    polls = [clean(), Findings(D, vouched=("ecc",), events=(fatal(2),), levels=(PRESENT,))] + [clean()] * 20
    states = run(polls)
    assert states[0].state is Health.HEALTHY
    assert all(t.state is Health.UNHEALTHY for t in states[1:]), "no number of clean polls ends a sticky fault"
    assert states[-1].since == 2.0 and states[-1].last_event == fatal(2)


def test_a_non_fatal_event_only_counts() -> None:
    note = HealthEvent(D, "xid", "13", "XID 13: not fatal, counted", 2.0, False)
    (t,) = start([D], 0.0)
    t, _ = advance(t, clean(), 1.0, K)
    t, new = advance(t, Findings(D, vouched=("xid",), events=(note,)), 2.0, K)
    assert new == (note,) and t.state is Health.HEALTHY and t.last_event == note and t.since == 1.0


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_a_level_fault_ends_on_the_kth_clean_reading_counted(n: int) -> None:
    polls = [clean(), Findings(D, vouched=("ecc",), levels=(gone(2),))] + [clean()] * (n + 1)
    states = run(polls, k=n)
    assert states[1].state is Health.UNHEALTHY
    # Clean readings are polls 3, 4, ...: the n-th of them is poll 2 + n.
    assert [t.state for t in states[2 : 2 + n - 1]] == [Health.UNHEALTHY] * (n - 1)
    assert states[2 + n - 1].state is Health.HEALTHY
    assert states[2 + n - 1].since == float(2 + n)


def test_unreadable_polls_do_not_count_nor_break_the_run() -> None:
    unread = Findings(D, unread=("presence: no answer",))
    polls = [Findings(D, vouched=("ecc",), levels=(gone(1),)), clean(), unread, unread, clean(), unread, clean()]
    states = run(polls)
    assert [t.state for t in states] == [Health.UNHEALTHY] * 6 + [Health.HEALTHY]
    assert [lost(t).clean for t in states[:6]] == [0, 1, 1, 1, 2, 2]


def test_a_bad_reading_starts_the_run_again_without_a_new_event() -> None:
    (t,) = start([D], 0.0)
    t, new = advance(t, Findings(D, levels=(gone(1),)), 1.0, K)
    assert len(new) == 1
    t, _ = advance(t, clean(), 2.0, K)
    t, _ = advance(t, clean(), 3.0, K)
    t, new = advance(t, Findings(D, levels=(gone(4),)), 4.0, K)
    assert new == () and lost(t).clean == 0
    assert t.last_event is not None and t.last_event.at == 1.0, "the same condition, not news"


def test_a_changed_condition_is_news() -> None:
    (t,) = start([D], 0.0)
    hbm = Level("components", HealthEvent(D, "components", "hbm", "unhealthy components: hbm", 1.0, True), "x")
    both = Level(
        "components", HealthEvent(D, "components", "hbm,sram", "unhealthy components: hbm, sram", 2, True), "x"
    )
    t, _ = advance(t, Findings(D, levels=(hbm,)), 1.0, K)
    t, new = advance(t, Findings(D, levels=(both,)), 2.0, K)
    assert [e.code for e in new] == ["hbm,sram"] and t.state is Health.UNHEALTHY


def test_an_unreadable_source_makes_a_healthy_device_unknown_and_keeps_an_unhealthy_one() -> None:
    unread = Findings(D, vouched=("xid",), unread=("ECC: permission denied",))
    states = run([clean(), unread])
    assert states[1].state is Health.UNKNOWN and states[1].unread == ("ECC: permission denied",)
    states = run([Findings(D, events=(fatal(1),)), unread])
    assert states[1].state is Health.UNHEALTHY


def test_clear_drops_sticky_faults_and_keeps_level_ones() -> None:
    (t,) = start([D], 0.0)
    t, _ = advance(t, Findings(D, events=(fatal(1),), levels=(gone(1),)), 1.0, K)
    (t,) = clear_device([t], D)
    assert [f.kind for f in t.faults] == ["lost"], "the device is still gone: its source says so"
    t, _ = advance(t, clean(), 2.0, K)
    assert t.state is Health.UNHEALTHY
    for n in (3.0, 4.0):
        t, _ = advance(t, clean(), n, K)
    assert t.state is Health.HEALTHY


def test_after_clear_the_next_poll_decides() -> None:
    (t,) = start([D], 0.0)
    t, _ = advance(t, Findings(D, vouched=("ecc",), events=(fatal(1),)), 1.0, K)
    (t,) = clear_device([t], D)
    t, _ = advance(t, clean(), 2.0, K)
    assert t.state is Health.HEALTHY and t.since == 2.0


@badinput("unnamed")
def test_clearing_a_device_not_on_the_host_names_it() -> None:
    with pytest.raises(InputError, match=r"no device 'neuron:9' on this host \(devices: a, b\)"):
        clear_device(start(["a", "b"], 0.0), "neuron:9")


def test_step_all_reports_every_device_in_order_with_words() -> None:
    tracked = start(["a", "b", "c"], 0.0)
    lost = HealthEvent("b", "lost", None, "device gone", 1.0, True)
    ecc = HealthEvent("c", "ecc", "mem_ecc_uncorrected", "mem_ecc_uncorrected grew from 0 to 2", 1.0, True)
    findings = {
        "a": Findings("a", vouched=("ecc",)),
        "b": Findings("b", levels=(Level("lost", lost, "present"),)),
        "c": Findings("c", vouched=("ecc",), events=(ecc,), unread=("components: permission denied",)),
    }
    tracked, report = step_all(tracked, findings, ["XID events: boom"], 1.0, 3)
    assert [d.device_id for d in report.devices] == ["a", "b", "c"]
    assert [d.state for d in report.devices] == [Health.HEALTHY, Health.UNHEALTHY, Health.UNHEALTHY]
    assert report.events == (lost, ecc)
    assert report.errors == ("XID events: boom", "c: components: permission denied")
    assert report.devices[0].healthy_again == ""
    assert report.devices[1].healthy_again == "present for 3 polls in a row (0 so far)"
    assert report.devices[2].healthy_again == (
        "cleared by hand: ray-accel health clear c (mem_ecc_uncorrected grew from 0 to 2)"
    )
    tracked, report = step_all(tracked, {}, [], 2.0, 3)
    assert report.devices[0].state is Health.UNKNOWN, "a device nothing could be read of"
    assert report.devices[0].healthy_again == "a poll that reads a health source of it (none can be read)"


def test_recovery_polls_default_and_setting() -> None:
    assert recovery_polls({}) == 3
    assert recovery_polls({RECOVERY_POLLS_ENV: "7"}) == 7


@badinput("unnamed")
@settings(max_examples=200, deadline=None)
@given(st.text(max_size=12))
def test_recovery_polls_refuses_anything_but_a_count_naming_it(text: str) -> None:
    stripped = text.strip()
    good = stripped.isascii() and stripped.isdigit() and 1 <= int(stripped) <= 10_000
    if good:
        assert recovery_polls({RECOVERY_POLLS_ENV: text}) == int(stripped)
    else:
        with pytest.raises(InputError, match=RECOVERY_POLLS_ENV):
            recovery_polls({RECOVERY_POLLS_ENV: text})


def test_a_device_in_doubt_is_healthy_again_only_when_cleared_by_hand() -> None:
    t = Tracked(device_id="d:0", state=Health.UNKNOWN, since=1.0, doubt="its kept health could not be read")
    assert healthy_again(t, 3) == "cleared by hand: ray-accel health clear d:0 (its kept health could not be read)"
