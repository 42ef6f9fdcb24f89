"""Repair, prove, return: a device out of service comes back only once its
check passed (`ray_accel.health.proof`, `rules.Facts.proven`), the check
and repair kept in the kept device health, scheduled by the decider with a
fake plugin, and `ray-accel health check` by hand."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_accel.cluster import statedir
from ray_accel.cluster.record import HostRecord
from ray_accel.core.checks import CheckOutcome, CheckResult, NotSupported, RepairOutcome, RepairResult
from ray_accel.core.health import DeviceHealth, Health, HealthEvent
from ray_accel.core.health_kept import Kept, KeptDevice, dumps, parse_kept, read_kept
from ray_accel.core.health_state import (
    HealthSettings,
    HostHealth,
    OnUnhealthy,
    PartitionHealth,
    PartitionState,
    PartState,
    Repair,
    parse_health,
)
from ray_accel.core.health_state import dumps as health_dumps
from ray_accel.health import proof, rules
from ray_accel.health.decider import Decider, with_proofs
from ray_accel.health.proof import AGAIN, Again, Proof, check_due, is_proven, proven, repair_due
from ray_accel.hostops import steps
from tests.clirun import run_cli_here
from tests.decider_harness import Spawn, record_of
from tests.stand_ins import ray_process
from tests.strategies import kept_devices, words

D = "neuron:9"
SHRINK = HealthSettings(action=OnUnhealthy.SHRINK, interval_s=1.0, drain_deadline_s=10.0)
EVENT = HealthEvent(D, "xid", "79", "XID 79", 5.0, True)


def healthy(since: float = 100.0, device: str = D) -> DeviceHealth:
    return DeviceHealth(device, Health.HEALTHY, since, None, "")


def unhealthy(since: float = 100.0, device: str = D) -> DeviceHealth:
    return DeviceHealth(device, Health.UNHEALTHY, since, replace(EVENT, device_id=device), "a reset")


def checked(outcome: CheckOutcome, started: float = 110.0, ended: float = 111.0) -> Proof:
    return Proof(check=CheckResult(D, outcome, "d", started, ended))


def repaired(outcome: RepairOutcome, started: float) -> RepairResult:
    return RepairResult(
        device_id=D, outcome=outcome, detail="d", action="GPU_RESET", started=started, ended=started, exit_code=0
    )


# ---------------------------------------------------------------- the rule's table


def test_the_serves_table_needs_proof_only_of_a_device_out_of_service() -> None:
    for health in Health:
        for p in (False, True):
            assert rules.SERVES[False, health, p] is (health is not Health.UNHEALTHY)
            assert rules.SERVES[True, health, p] is (health is Health.HEALTHY and p)
    assert len(rules.SERVES) == 2 * len(Health) * 2


FULL = tuple(f"neuron:{i}" for i in range(8, 16))


def shrunk() -> PartitionHealth:
    return PartitionHealth(
        partition="p1",
        state=PartState.SHRUNK,
        since=0.0,
        devices=tuple(d for d in FULL if d != D),
        out=(D,),
        node_id="cd",
        detail="",
    )


def all_healthy() -> dict[str, DeviceHealth]:
    return {d: healthy(device=d) for d in FULL}


def test_a_shrunk_partition_waits_for_an_unproven_device_and_takes_a_proven_one_back() -> None:
    unproven = rules.Facts(FULL, True, all_healthy(), frozenset())
    step = rules.decide(SHRINK, shrunk(), unproven, 200.0)
    assert step.effect is rules.Effect.NONE and step.view.state is PartState.SHRUNK
    provenly = rules.Facts(FULL, True, all_healthy(), frozenset({D}))
    step = rules.decide(SHRINK, shrunk(), provenly, 200.0)
    assert step.effect is rules.Effect.DRAIN and step.view.state is PartState.RESTORING
    assert step.view.target == FULL


def test_a_stopped_partition_restarts_with_its_proven_devices_only() -> None:
    stopped = PartitionHealth(
        partition="p1", state=PartState.STOPPED, since=0.0, devices=(), out=FULL, node_id=None, detail="stopped: x"
    )
    half = frozenset(FULL[:4])
    step = rules.decide(SHRINK, stopped, rules.Facts(FULL, False, all_healthy(), half), 200.0)
    assert step.effect is rules.Effect.RESTART and step.view.devices == FULL[:4]
    # Under drain it comes back whole or not at all: nothing until every device is proven.
    drain = HealthSettings(action=OnUnhealthy.DRAIN, interval_s=1.0, drain_deadline_s=10.0)
    assert rules.decide(drain, stopped, rules.Facts(FULL, False, all_healthy(), half), 200.0).effect is (
        rules.Effect.NONE
    )
    whole = rules.decide(drain, stopped, rules.Facts(FULL, False, all_healthy(), frozenset(FULL)), 200.0)
    assert whole.effect is rules.Effect.RESTART and whole.view.devices == FULL


def test_a_stopped_partition_needs_proof_only_of_the_devices_a_fault_took_out() -> None:
    record = out_record(ray_process(1), SHRINK, PartState.STOPPED)
    (p,) = record.partitions
    two = replace(p, device_ids=("neuron:0", "neuron:1"), out=("neuron:0",))
    record = replace(record, partitions=(two,))
    assert rules.kept_in(record) == {"neuron:1"}
    full = ("neuron:0", "neuron:1")
    stopped = PartitionHealth(
        partition="p0", state=PartState.STOPPED, since=0.0, devices=(), out=full, node_id=None, detail="shrink: stopped"
    )
    health = {d: healthy(device=d) for d in full}
    step = rules.decide(SHRINK, stopped, rules.Facts(full, False, health, rules.kept_in(record)), 200.0)
    assert step.effect is rules.Effect.RESTART and step.view.devices == ("neuron:1",)
    step = rules.decide(SHRINK, stopped, rules.Facts(full, False, health, rules.kept_in(record) | {"neuron:0"}), 200.0)
    assert step.effect is rules.Effect.RESTART and step.view.devices == full


# ---------------------------------------------------------------- proven, and when to check


def test_proven_by_outcome_and_only_a_check_since_the_device_came_back() -> None:
    assert {o for o, a in AGAIN.items() if a is Again.NEVER} == {CheckOutcome.PASSED, CheckOutcome.UNAVAILABLE}
    for outcome in CheckOutcome:
        assert is_proven(healthy(), checked(outcome)) is (AGAIN[outcome] is Again.NEVER)
    # A pass made before its last fault cleared (or its clear) proves nothing now.
    assert not is_proven(healthy(since=120.0), checked(CheckOutcome.PASSED))
    assert not is_proven(unhealthy(), checked(CheckOutcome.PASSED))
    assert not is_proven(healthy(), None)
    # A check cut short since its pass: not proven until it is checked again.
    assert not is_proven(healthy(), replace(checked(CheckOutcome.PASSED), checking=115.0))


def test_every_device_is_proven_with_the_return_check_off_or_under_report() -> None:
    h = {D: healthy()}
    assert proven(SHRINK, [D], h, {}) == frozenset()
    assert proven(replace(SHRINK, return_check=False), [D], h, {}) == {D}
    assert proven(HealthSettings(action=OnUnhealthy.REPORT), [D], h, {}) == {D}
    assert proven(SHRINK, [D], h, {D: checked(CheckOutcome.PASSED)}) == {D}


@pytest.mark.parametrize(
    ("outcome", "now", "due"),
    [
        (CheckOutcome.PASSED, 500.0, False),
        (CheckOutcome.UNAVAILABLE, 500.0, False),
        (CheckOutcome.BUSY, 111.5, True),  # at the next poll
        (CheckOutcome.FAILED, 115.0, False),  # within --check-interval (10 s) of its end
        (CheckOutcome.FAILED, 121.0, True),
        (CheckOutcome.TIMEOUT, 120.9, False),
        (CheckOutcome.TIMEOUT, 121.0, True),
    ],
)
def test_when_a_check_is_due_by_its_last_outcome(outcome: CheckOutcome, now: float, due: bool) -> None:
    assert check_due(SHRINK, healthy(), checked(outcome), now) is due


def test_a_check_is_due_when_never_made_since_the_device_came_back_or_cut_short() -> None:
    assert check_due(SHRINK, healthy(), None, 100.0)
    assert check_due(SHRINK, healthy(since=200.0), checked(CheckOutcome.PASSED), 200.0)
    assert check_due(SHRINK, healthy(), replace(checked(CheckOutcome.PASSED), checking=150.0), 150.0)
    # Never on a device not healthy, never with the return check off or under report.
    assert not check_due(SHRINK, unhealthy(), None, 100.0)
    assert not check_due(SHRINK, None, None, 100.0)
    assert not check_due(replace(SHRINK, return_check=False), healthy(), None, 100.0)
    assert not check_due(HealthSettings(action=OnUnhealthy.REPORT), healthy(), None, 100.0)


def test_a_repair_once_per_fault_and_only_when_asked_for() -> None:
    reset = replace(SHRINK, repair=Repair.RESET)
    assert repair_due(reset, unhealthy(since=100.0), None)
    assert not repair_due(SHRINK, unhealthy(since=100.0), None), "--repair off"
    assert not repair_due(reset, healthy(), None)
    assert not repair_due(reset, unhealthy(since=100.0), Proof(repair=repaired(RepairOutcome.FAILED, 100.0)))
    assert repair_due(reset, unhealthy(since=200.0), Proof(repair=repaired(RepairOutcome.OK, 100.0))), "a new fault"
    assert proof.repair_note(repaired(RepairOutcome.REBOOT_REQUIRED, 1.0)) == "reboot required"
    assert proof.repair_note(repaired(RepairOutcome.OPERATOR, 1.0)) == "the repair is the operator's"
    assert proof.repair_note(repaired(RepairOutcome.OK, 1.0)) == ""


# ---------------------------------------------------------------- kept and settings round trips

outcomes = st.sampled_from(list(CheckOutcome))
checks = st.builds(
    lambda o, d, s, e: CheckResult(D, o, d, s, s + e), outcomes, words, st.floats(0, 1e10), st.floats(0, 1e6)
)
repairs = st.builds(
    lambda o, d, a, s, e, c: RepairResult(
        device_id=D, outcome=o, detail=d, action=a, started=s, ended=s + e, exit_code=c
    ),
    st.sampled_from(list(RepairOutcome)),
    words,
    words,
    st.floats(0, 1e10),
    st.floats(0, 1e6),
    st.none() | st.integers(-255, 255),
)
proven_devices = st.builds(
    lambda k, c, w, r: replace(k, check=c, checking=w, repair=r),
    kept_devices,
    st.none() | checks,
    st.none() | st.floats(0, 1e10),
    st.none() | repairs,
)


@settings(max_examples=100, deadline=None)
@given(st.lists(proven_devices, max_size=1), st.floats(0, 1e10))
def test_the_kept_checks_and_repairs_read_back_the_same(devices: list[KeptDevice], at: float) -> None:
    assert parse_kept(dumps(devices, at), "f") == Kept(tuple(devices))


def test_a_kept_file_from_before_the_checks_reads_with_none_kept() -> None:
    raw = json.dumps({"version": 1, "at": 1.0, "devices": [{"device_id": D, "since": 1.0}]})
    (device,) = parse_kept(raw, "f").devices
    assert device.check is None and device.checking is None and device.repair is None


@settings(max_examples=100, deadline=None)
@given(
    st.booleans(), st.floats(0, 3600), st.floats(0.001, 24 * 3600.0), st.sampled_from(list(Repair)), st.lists(checks)
)
def test_the_settings_and_the_proofs_in_health_json_read_back(
    on: bool, interval: float, timeout: float, repair: Repair, made: Sequence[CheckResult]
) -> None:
    s = HealthSettings(
        action=OnUnhealthy.SHRINK,
        interval_s=1.0,
        drain_deadline_s=10.0,
        return_check=on,
        check_interval_s=interval,
        check_timeout_s=timeout,
    )
    s = replace(s, repair=repair)
    health = HostHealth(
        at=1.0,
        settings=s,
        devices=(),
        partitions=(),
        checks=tuple(made[:1]),
        check_counts={D: {"failed": 2}},
        checking={D: 3.0},
    )
    assert parse_health(health_dumps(health), "h") == health


def test_settings_of_an_older_record_read_with_the_defaults() -> None:
    s = HealthSettings.from_json({"action": "shrink", "interval_s": 2.0, "drain_deadline_s": 10.0})
    assert s == HealthSettings(action=OnUnhealthy.SHRINK, interval_s=2.0, drain_deadline_s=10.0)
    assert s.return_check and s.check_interval_s == 10.0 and s.check_timeout_s == 60.0 and s.repair is Repair.OFF


# ---------------------------------------------------------------- the decider's scheduling, with a fake plugin


class FakePlugin:
    """Answers checks from a list of outcomes and repairs with one outcome; records each call."""

    def __init__(self, outcomes: list[CheckOutcome], repair: RepairOutcome | NotSupported = RepairOutcome.OK):
        self.outcomes, self.repair_outcome = outcomes, repair
        self.calls: list[tuple[str, str]] = []

    def check(self, device_id: str, timeout_s: float) -> CheckResult:
        self.calls.append(("check", device_id))
        return CheckResult(device_id, self.outcomes.pop(0), "fake", 1000.0, 1000.0)

    def repair(self, device_id: str) -> RepairResult | NotSupported:
        self.calls.append(("repair", device_id))
        if isinstance(self.repair_outcome, NotSupported):
            return self.repair_outcome
        return repaired(self.repair_outcome, 1000.0)


class FakeMonitor:
    def kept(self) -> tuple[KeptDevice, ...]:
        return ()


def out_record(raylet: object, settings: HealthSettings, part_state: PartState) -> HostRecord:
    """A host whose one partition p0 has its one device, neuron:0, out of service."""
    record = record_of(raylet, settings)
    (p,) = record.partitions
    p = replace(p, out=("neuron:0",), out_core_ids=p.core_ids, health=PartitionState(part_state, 1.0))
    return replace(record, partitions=(p,))


def decider_for(record: HostRecord, directory: Path, plugin: FakePlugin) -> Decider:
    place = statedir.Place(directory, directory / statedir.STATE_FILE, False)
    health = HostHealth(at=1.0, settings=record.health or HealthSettings(), devices=(), partitions=())
    return Decider(
        place=place,
        created=record.created,
        settings=record.health or HealthSettings(),
        devices=(),
        monitor=FakeMonitor(),  # type: ignore[arg-type]
        health=health,
        plugin=plugin,  # type: ignore[arg-type]
    )


def test_the_decider_checks_a_healthy_out_device_once_then_again_after_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    monkeypatch.setattr("ray_accel.health.decider.say", said.append)
    settings_ = replace(SHRINK, check_interval_s=0.0)
    record = out_record(ray_process(1), settings_, PartState.STOPPED)
    plugin = FakePlugin([CheckOutcome.FAILED, CheckOutcome.PASSED])
    decider = decider_for(record, tmp_path, plugin)
    health = {"neuron:0": healthy(since=1.0, device="neuron:0")}
    decider.prove_devices(record, health)
    assert plugin.calls == [("check", "neuron:0")]
    kept = {k.device_id: k for k in read_kept(tmp_path).devices}
    assert kept["neuron:0"].check is not None and kept["neuron:0"].check.outcome is CheckOutcome.FAILED
    assert kept["neuron:0"].checking is None
    assert any(m.startswith(f"step {steps.CHECK}: checking neuron:0") for m in said), said
    decider.prove_devices(record, health)
    assert plugin.calls == [("check", "neuron:0")] * 2
    assert proven(settings_, ["neuron:0"], health, decider.proofs) == {"neuron:0"}
    decider.prove_devices(record, health)
    assert len(plugin.calls) == 2, "a passed device is not checked again"
    assert decider.health.check_counts == {"neuron:0": {"failed": 1, "passed": 1}}


def test_the_decider_never_checks_or_repairs_a_device_a_raylet_may_serve(tmp_path: Path) -> None:
    reset = replace(SHRINK, repair=Repair.RESET)
    for part_state in (PartState.DRAINING, PartState.RESTORING):
        record = out_record(ray_process(1), reset, part_state)
        plugin = FakePlugin([CheckOutcome.PASSED])
        decider = decider_for(record, tmp_path, plugin)
        decider.prove_devices(record, {"neuron:0": healthy(device="neuron:0")})
        decider.prove_devices(record, {"neuron:0": unhealthy(device="neuron:0")})
        assert plugin.calls == []
    served = record_of(ray_process(1), reset)
    plugin = FakePlugin([CheckOutcome.PASSED])
    decider_for(served, tmp_path, plugin).prove_devices(served, {"neuron:0": healthy(device="neuron:0")})
    assert plugin.calls == [] and rules.free_devices(served) == ()


def test_the_decider_repairs_once_per_fault_and_keeps_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ray_accel.health.decider.say", lambda m: None)
    reset = replace(SHRINK, repair=Repair.RESET)
    record = out_record(ray_process(1), reset, PartState.STOPPED)
    plugin = FakePlugin([], RepairOutcome.REBOOT_REQUIRED)
    decider = decider_for(record, tmp_path, plugin)
    bad = {"neuron:0": unhealthy(since=5.0, device="neuron:0")}
    decider.prove_devices(record, bad)
    decider.prove_devices(record, bad)
    assert plugin.calls == [("repair", "neuron:0")]
    (kept,) = read_kept(tmp_path).devices
    assert kept.repair is not None and kept.repair.outcome is RepairOutcome.REBOOT_REQUIRED
    # A backend with no repair: the operator's, said, never an error.
    plugin = FakePlugin([], NotSupported.NOT_SUPPORTED)
    decider = decider_for(record, tmp_path / "x", plugin)
    (tmp_path / "x").mkdir()
    decider.prove_devices(record, bad)
    assert decider.proofs["neuron:0"].repair is not None
    assert decider.proofs["neuron:0"].repair.outcome is RepairOutcome.OPERATOR


def test_a_check_begun_and_never_ended_is_kept_so_the_next_decider_checks_again(tmp_path: Path) -> None:
    started = KeptDevice(
        device_id="neuron:0", since=1.0, checking=50.0, check=CheckResult("neuron:0", CheckOutcome.PASSED, "", 40, 41)
    )
    merged = with_proofs((KeptDevice(device_id="neuron:0", since=1.0),), {"neuron:0": Proof(started.check, 50.0)}, 60.0)
    assert merged == (started,)
    assert with_proofs((), {"neuron:0": Proof(None, 50.0)}, 60.0) == (
        KeptDevice(device_id="neuron:0", since=60.0, checking=50.0),
    )
    assert check_due(SHRINK, healthy(since=1.0, device="neuron:0"), Proof(started.check, 50.0), 60.0)


# ---------------------------------------------------------------- ray-accel health check


def test_health_check_by_hand_exit_codes(env: dict[str, str], spawn: Spawn) -> None:
    served = record_of(ray_process(spawn()), SHRINK)
    statedir.save(served)
    proc = run_cli_here("health", "check", "neuron:0", env=env)
    assert proc.returncode == 2 and "neuron:0" in proc.stderr and "served by partition p0" in proc.stderr
    proc = run_cli_here("health", "check", "neuron:7", env=env)
    assert proc.returncode == 2 and "'neuron:7'" in proc.stderr
    proc = run_cli_here("health", "check", "neuron:0", "--timeout", "0", env=env)
    assert proc.returncode == 2 and "0" in proc.stderr
    statedir.save(out_record(ray_process(spawn()), SHRINK, PartState.STOPPED))
    Path(env["RAYACCEL_MOCK_FAULTS"]).write_text(json.dumps({"checks": {"neuron:0": "failed"}}))
    proc = run_cli_here("health", "check", "neuron:0", "--json", env=env)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["outcome"] == "failed"
    (kept,) = read_kept(Path(env["RAYACCEL_STATE_DIR"])).devices
    assert kept.check is not None and kept.check.outcome is CheckOutcome.FAILED
    Path(env["RAYACCEL_MOCK_FAULTS"]).write_text(json.dumps({"checks": {"neuron:0": "passed"}}))
    proc = run_cli_here("health", "check", "neuron:0", env=env)
    assert proc.returncode == 0 and proc.stdout.startswith("neuron:0: passed"), proc.stderr


# ---------------------------------------------------------------- an out device stays visible


def out_health() -> HostHealth:
    """p1 shrunk without neuron:9 (unhealthy, its check failed, a repair made); p0 serving neuron:0."""
    parts = (
        PartitionHealth(
            partition="p0", state=PartState.SERVING, since=1.0, devices=("neuron:0",), out=(), node_id="ab", detail=""
        ),
        PartitionHealth(
            partition="p1",
            state=PartState.SHRUNK,
            since=1.0,
            devices=("neuron:8",),
            out=(D,),
            node_id="cd",
            detail="without neuron:9",
        ),
    )
    devices = (healthy(device="neuron:0"), healthy(device="neuron:8"), unhealthy())
    return HostHealth(
        at=1.0,
        settings=SHRINK,
        devices=devices,
        partitions=parts,
        checks=(CheckResult(D, CheckOutcome.FAILED, "mock check: failed", 10.0, 11.0),),
        repairs=(repaired(RepairOutcome.REBOOT_REQUIRED, 5.0),),
        check_counts={D: {"failed": 3}},
        repair_counts={D: {"reboot-required": 1}},
    )


def test_an_out_device_reads_0_healthy_and_its_checks_and_repairs_are_counted() -> None:
    from ray_accel.metrics.export import GAUGES, HostValues, health_values, out_values

    host = HostValues("h_10.0.0.1", "neuron", "Trainium", 16, 1)
    ((key, value, tags),) = out_values(out_health(), host)
    assert (key, value) == ("healthy", 0.0) and tags["device_id"] == D and tags["partition"] == "p1"
    assert set(tags) == set(GAUGES["healthy"].tags)
    values = health_values(out_health(), "h_10.0.0.1")
    assert ("checks", 3.0, {"host": "h_10.0.0.1", "partition": "p1", "device_id": D, "outcome": "failed"}) in values
    assert (
        "repairs",
        1.0,
        {"host": "h_10.0.0.1", "partition": "p1", "device_id": D, "outcome": "reboot-required"},
    ) in (values)
    assert GAUGES["checks"].name == "accel_device_checks_total"
    assert GAUGES["repairs"].name == "accel_device_repairs_total"


def test_top_lists_an_out_device_with_its_health_check_and_repair() -> None:
    from ray_accel.cli.render import top_text
    from ray_accel.cli.top import top_payload
    from ray_accel.core.reader import dump
    from ray_accel.metrics.export import out_devices

    rows = [dump(o) for o in out_devices(out_health(), "h_10.0.0.1")]
    assert [o.id for o in out_devices(out_health(), "h_10.0.0.1")] == [D]
    snap = {"devices": [], "workloads": [], "orphans": [], "errors": [], "took_s": 0.01, "out_of_service": rows}
    from ray_accel.cluster.status import ClusterPartition

    part = ClusterPartition(
        host="h_10.0.0.1",
        host_name="h",
        partition="p0",
        node_id="n1",
        ip="10.0.0.1",
        alive=True,
        resource=None,
        accelerator_type=None,
        core_ids=None,
        mask=None,
        device_indexes=None,
        total={},
        available={},
    )
    payload = top_payload([part], {"n1": snap})
    (row,) = payload["devices"]
    assert row["id"] == D and row["healthy"] is False and row["health_state"] == "unhealthy"
    assert row["check"]["outcome"] == "failed" and row["repair"]["outcome"] == "reboot-required"
    payload["head"], payload["jobs"] = None, []
    text = top_text(payload)
    assert "out of service; last check failed: mock check: failed" in text


def test_health_clear_with_no_decider_checks_first_and_clears_only_on_passed(
    env: dict[str, str],
    spawn: Spawn,
) -> None:
    from ray_accel.core.files import write_atomic
    from ray_accel.core.health_kept import KEPT_FILE
    from ray_accel.core.health_track import Fault

    statedir.save(out_record(ray_process(spawn()), SHRINK, PartState.STOPPED))
    directory = Path(env["RAYACCEL_STATE_DIR"])
    event = HealthEvent("neuron:0", "ecc", "mem_ecc_uncorrected", "grew", 1.0, True)
    fault = Fault("ecc", event, sticky=True)
    write_atomic(directory / KEPT_FILE, dumps([KeptDevice(device_id="neuron:0", since=1.0, faults=(fault,))], 1.0))
    Path(env["RAYACCEL_MOCK_FAULTS"]).write_text(json.dumps({"checks": {"neuron:0": "failed"}}))
    proc = run_cli_here("health", "clear", "neuron:0", env=env)
    assert proc.returncode == 1 and "not cleared" in proc.stderr and "failed" in proc.stderr, proc.stderr
    (kept,) = read_kept(directory).devices
    assert kept.faults == (fault,) and kept.check is not None and kept.check.outcome is CheckOutcome.FAILED
    Path(env["RAYACCEL_MOCK_FAULTS"]).write_text(json.dumps({"checks": {"neuron:0": "passed"}}))
    proc = run_cli_here("health", "clear", "neuron:0", env=env)
    assert proc.returncode == 0, proc.stderr
    (kept,) = read_kept(directory).devices
    assert kept.faults == () and kept.check is not None and kept.check.outcome is CheckOutcome.PASSED


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--check-timeout", "0"),
        ("--check-timeout", "90000"),
        ("--check-timeout", "nan"),
        ("--check-interval", "-1"),
        ("--repair", "reboot"),
        ("--return-check", "maybe"),
    ],
)
def test_start_refuses_a_bad_check_setting_naming_it_before_anything_starts(
    env: dict[str, str],
    flag: str,
    value: str,
) -> None:
    proc = run_cli_here("start", "--head", "--on-unhealthy", "shrink", flag, value, env=env)
    assert proc.returncode == 2 and flag in proc.stderr and value in proc.stderr, proc.stderr
    assert not (Path(env["RAYACCEL_STATE_DIR"]) / "host.json").exists()
