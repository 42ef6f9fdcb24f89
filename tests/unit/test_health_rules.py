"""The decider's state machine of one partition (`ray_accel.health.rules`):
pure, so every path is walked without Ray, processes or time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from ray_accel.core.health import DeviceHealth, Health, HealthEvent
from ray_accel.core.health_state import HealthSettings, OnUnhealthy, PartitionHealth, PartState
from ray_accel.health.rules import RESTART_FAILED, RETRY_S, TABLE, Effect, Facts, Seen, decide, observe, wanted

FULL = tuple(f"neuron:{i}" for i in range(8, 16))
SHRINK = HealthSettings(action=OnUnhealthy.SHRINK, interval_s=1.0, drain_deadline_s=10.0)
DRAIN = HealthSettings(action=OnUnhealthy.DRAIN, interval_s=1.0, drain_deadline_s=10.0)
REPORT = HealthSettings(action=OnUnhealthy.REPORT, interval_s=1.0, drain_deadline_s=10.0)


def health(
    bad: Sequence[str] = (), unknown: Sequence[str] = (), devices: Sequence[str] = FULL
) -> dict[str, DeviceHealth]:
    out = {}
    for d in devices:
        if d in bad:
            event = HealthEvent(d, "xid", "79", "XID 79 (fallen off the bus)", 5.0, True)
            out[d] = DeviceHealth(d, Health.UNHEALTHY, 5.0, event, f"cleared by hand: ray-accel health clear {d}")
        elif d in unknown:
            out[d] = DeviceHealth(d, Health.UNKNOWN, 5.0, None, "a readable health source")
        else:
            out[d] = DeviceHealth(d, Health.HEALTHY, 1.0, None, "")
    return out


def facts(h: Mapping[str, DeviceHealth], alive: bool = True, proven: Sequence[str] = FULL) -> Facts:
    """What is true now; every device proven unless said (the cells without a check to wait for)."""
    return Facts(full=FULL, raylet_alive=alive, health=h, proven=frozenset(proven))


def serving() -> PartitionHealth:
    """A partition the decider has not seen before: serving as recorded."""
    return PartitionHealth(
        partition="p1", state=PartState.SERVING, since=0.0, devices=FULL, out=(), node_id="ab12", detail=""
    )


def shrunk(*out: str) -> PartitionHealth:
    """A partition restarted without `out`."""
    return PartitionHealth(
        partition="p1",
        state=PartState.SHRUNK,
        since=0.0,
        devices=tuple(d for d in FULL if d not in out),
        out=out,
        node_id="cd34",
        detail="",
    )


def test_a_fatal_device_drains_then_shrinks_at_the_deadline() -> None:
    bad = health(bad=["neuron:11"])
    step = decide(SHRINK, serving(), facts(bad), 100.0)
    assert step.effect is Effect.DRAIN and step.view.state is PartState.DRAINING
    assert step.view.out == ("neuron:11",) and step.view.deadline == 110.0
    assert step.view.target == tuple(d for d in FULL if d != "neuron:11")
    assert "neuron:11: XID 79" in step.message and "p1" in step.message
    # Before the deadline, while the raylet runs: nothing.
    assert decide(SHRINK, step.view, facts(bad), 105.0).effect is Effect.NONE
    due = decide(SHRINK, step.view, facts(bad), 110.0)
    assert due.effect is Effect.RESTART and due.view.devices == step.view.target
    # Ray ends an idle drained raylet itself: no need to wait for the deadline.
    gone = decide(SHRINK, step.view, facts(bad, alive=False), 101.0)
    assert gone.effect is Effect.RESTART
    after = due.view  # once the restart has succeeded
    assert after.state is PartState.SHRUNK and after.out == ("neuron:11",) and after.devices == due.view.devices
    assert "neuron:11" in after.detail
    assert decide(SHRINK, after, facts(bad), 120.0).effect is Effect.NONE, "shrunk and stable"


def test_a_device_healthy_again_brings_the_whole_partition_back() -> None:
    step = decide(SHRINK, shrunk("neuron:11"), facts(health()), 50.0)
    assert step.effect is Effect.DRAIN and step.view.state is PartState.RESTORING
    assert step.view.target == FULL and "healthy again" in step.message
    due = decide(SHRINK, step.view, facts(health()), 60.0)
    assert due.effect is Effect.RESTART and due.view.devices == FULL
    back = due.view
    assert back.state is PartState.SERVING and back.out == () and back.detail == ""


def test_unknown_health_neither_drains_nor_brings_back() -> None:
    assert decide(SHRINK, serving(), facts(health(unknown=FULL)), 1.0).effect is Effect.NONE
    step = decide(SHRINK, shrunk("neuron:11"), facts(health(unknown=["neuron:11"])), 5.0)
    assert step.effect is Effect.NONE and step.view.state is PartState.SHRUNK, "unknown is not healthy"


def test_report_never_changes_scheduling_but_says_why() -> None:
    step = decide(REPORT, serving(), facts(health(bad=["neuron:9"])), 1.0)
    assert step.effect is Effect.NONE and step.view.state is PartState.SERVING and step.view.devices == FULL
    assert "neuron:9" in step.view.detail and "report" in step.view.detail


def test_drain_stops_the_partition_and_restarts_it_only_when_every_device_is_healthy() -> None:
    two = health(bad=["neuron:9", "neuron:12"])
    step = decide(DRAIN, serving(), facts(two), 1.0)
    assert step.effect is Effect.DRAIN and step.view.target == ()
    stop = decide(DRAIN, step.view, facts(two), 11.0)
    assert stop.effect is Effect.STOP and stop.view.state is PartState.STOPPED and stop.view.out == FULL
    one = health(bad=["neuron:12"])
    assert decide(DRAIN, stop.view, facts(one, alive=False), 20.0).effect is Effect.NONE
    back = decide(DRAIN, stop.view, facts(health(), alive=False), 21.0)
    assert back.effect is Effect.RESTART and back.view.devices == FULL


def test_shrink_with_every_device_bad_stops_and_returns_with_the_healthy_ones() -> None:
    all_bad = health(bad=FULL)
    step = decide(SHRINK, serving(), facts(all_bad), 1.0)
    stop = decide(SHRINK, step.view, facts(all_bad), 11.0)
    assert stop.effect is Effect.STOP
    some = health(bad=FULL[2:])
    back = decide(SHRINK, stop.view, facts(some, alive=False), 12.0)
    assert back.effect is Effect.RESTART and back.view.devices == FULL[:2]


def test_a_device_failing_during_the_drain_leaves_the_target() -> None:
    step = decide(SHRINK, serving(), facts(health(bad=["neuron:8"])), 1.0)
    worse = health(bad=["neuron:8", "neuron:15"])
    due = decide(SHRINK, step.view, facts(worse), 11.0)
    assert due.effect is Effect.RESTART and "neuron:15" not in due.view.devices and "neuron:8" not in due.view.devices


def test_a_failed_restart_is_tried_again_after_a_while() -> None:
    # As the actions leave it after a restart that failed.
    failed = PartitionHealth(
        partition="p1",
        state=PartState.STOPPED,
        since=100.0,
        devices=(),
        out=FULL,
        node_id=None,
        detail=f"{RESTART_FAILED}: port taken",
    )
    assert decide(SHRINK, failed, facts(health(), alive=False), 100.0 + RETRY_S / 2).effect is Effect.NONE
    assert decide(SHRINK, failed, facts(health(), alive=False), 100.0 + RETRY_S).effect is Effect.RESTART


STATES = st.sampled_from(list(Health))


@given(
    st.lists(STATES, min_size=len(FULL), max_size=len(FULL)),
    st.sampled_from([SHRINK, DRAIN, REPORT]),
    st.sampled_from(list(PartState)),
    st.booleans(),
    st.floats(0, 1e6),
    st.sets(st.sampled_from(FULL)),
)
def test_properties_of_every_step(
    states: list[Health], settings: HealthSettings, state: PartState, alive: bool, now: float, proven: set[str]
) -> None:
    h = {d: DeviceHealth(d, s, 0.0, None, "") for d, s in zip(FULL, states, strict=True)}
    out = tuple(d for d, s in zip(FULL, states, strict=True) if s is not Health.HEALTHY)
    view = PartitionHealth(
        partition="p1",
        state=state,
        since=0.0,
        devices=tuple(d for d in FULL if d not in out),
        out=out,
        node_id="ab12",
        detail="",
        deadline=5.0,
        target=FULL[:4],
    )
    step = decide(settings, view, Facts(FULL, alive, h, frozenset(proven)), now)
    # A device out of service comes back only proven: into a restore's target, or a stopped partition's restart.
    back = set(step.view.target or ()) if step.view.state is PartState.RESTORING else set()
    if view.state is PartState.STOPPED and step.effect is Effect.RESTART:
        back = set(step.view.devices)
    if view.state in (PartState.SERVING, PartState.SHRUNK, PartState.STOPPED):
        assert back - set(view.devices) <= proven
    # Never restarted with a device that is unhealthy, never one that is not the partition's.
    assert set(step.view.devices) <= set(FULL) and set(step.view.out) <= set(FULL)
    if step.effect is Effect.RESTART:
        assert step.view.devices
        assert all(h[d].state is not Health.UNHEALTHY for d in step.view.devices)
    if settings.action is OnUnhealthy.REPORT:
        assert step.effect is Effect.NONE and step.view.state is PartState.SERVING
    # UNKNOWN alone never takes a device out.
    if all(s is not Health.UNHEALTHY for s in states) and state in (PartState.SERVING, PartState.SHRUNK):
        assert step.effect is not Effect.STOP
        assert not (step.effect is Effect.DRAIN and step.view.state is PartState.DRAINING)


def test_wanted_keeps_order_and_needs_healthy_to_return() -> None:
    h = health(bad=["neuron:9"], unknown=["neuron:10", "neuron:12"])
    assert wanted(FULL, ("neuron:12",), h, FULL) == tuple(d for d in FULL if d not in ("neuron:9", "neuron:12"))
    assert wanted(FULL, FULL, h, FULL) == tuple(d for d in FULL if d not in ("neuron:9", "neuron:10", "neuron:12"))
    assert replace(serving(), out=()).devices == FULL


# Every cell of the table, spelled out again: state, what a poll sees, the
# effect, the state once it has succeeded.
CELLS = """
serving   steady          none     serving
serving   unhealthy       drain    draining
serving   back            drain    restoring
shrunk    steady          none     shrunk
shrunk    unhealthy       drain    draining
shrunk    back            drain    restoring
draining  steady          none     draining
draining  full            restart  serving
draining  part            restart  shrunk
draining  nothing         stop     stopped
restoring steady          none     restoring
restoring full            restart  serving
restoring part            restart  shrunk
restoring nothing         stop     stopped
stopped   steady          none     stopped
stopped   full            restart  serving
stopped   part            restart  shrunk
stopped   nothing         none     stopped
"""


def scene(state: PartState, seen: Seen) -> tuple[PartitionHealth, Facts, float]:
    """A partition in `state` and a poll that sees `seen`."""
    if state in (PartState.SERVING, PartState.SHRUNK):
        out = ("neuron:15",) if state is PartState.SHRUNK or seen is Seen.BACK else ()
        bad = ["neuron:11"] if seen is Seen.UNHEALTHY else []
        bad += list(out) if seen is not Seen.BACK else []
        view = PartitionHealth(
            partition="p1",
            state=state,
            since=0.0,
            devices=tuple(d for d in FULL if d not in out),
            out=out,
            node_id="ab12",
            detail="",
        )
        return view, facts(health(bad=bad)), 1.0
    if state is PartState.STOPPED:
        bad = {Seen.FULL: (), Seen.PART: FULL[4:], Seen.NOTHING: FULL, Seen.STEADY: ()}[seen]
        detail = f"{RESTART_FAILED}: port taken" if seen is Seen.STEADY else "stopped"
        view = PartitionHealth(
            partition="p1", state=state, since=0.0, devices=(), out=FULL, node_id=None, detail=detail
        )
        return view, facts(health(bad=bad), alive=False), 1.0
    target = {Seen.FULL: FULL, Seen.PART: FULL[:4], Seen.NOTHING: (), Seen.STEADY: FULL[:4]}[seen]
    view = PartitionHealth(
        partition="p1",
        state=state,
        since=0.0,
        devices=FULL,
        out=(),
        node_id="ab12",
        detail="",
        deadline=10.0,
        target=target,
    )
    return view, facts(health(), alive=seen is Seen.STEADY), 5.0 if seen is Seen.STEADY else 20.0


def test_every_cell_of_the_table() -> None:
    rows = [line.split() for line in CELLS.strip().splitlines()]
    cells = {(PartState(s), Seen(o)): (Effect(e), PartState(n)) for s, o, e, n in rows}
    assert cells.keys() == TABLE.keys() and len(cells) == len(rows)
    for (state, seen), (effect, after) in cells.items():
        view, f, now = scene(state, seen)
        assert observe(SHRINK, view, f, now)[0] is seen, (state, seen)
        step = decide(SHRINK, view, f, now)
        assert (step.effect, step.view.state) == (effect, after), (state, seen)
        assert TABLE[state, seen] == (effect, after)
        if effect is Effect.RESTART:  # with every device, or the four the scene leaves
            assert step.view.devices == (FULL if after is PartState.SERVING else FULL[:4]), (state, seen)
            assert step.view.out == tuple(d for d in FULL if d not in step.view.devices)
        if effect is Effect.DRAIN:
            assert step.view.deadline == now + SHRINK.drain_deadline_s and step.message
