"""Kept device health (`ray_accel.core.health_kept`): what of a rule's state
outlives the decider, read back through the one reader; anything that is
not a file of this version is unknown with why, never healthy; a device the
host's record has out stays out, in doubt, until cleared by hand. Then the
mock's absolute counters, and `ray-accel health clear` where no decider runs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ray_accel_mock.faults import FaultFileError, parse_faults
from ray_accel_mock.health import MockHealthMonitor
from ray_accel_mock.spec import load_spec

from ray_accel.cluster import statedir
from ray_accel.core.files import write_atomic
from ray_accel.core.health import DeviceHealth, Health, HealthEvent, HealthReport
from ray_accel.core.health_kept import (
    KEPT_FILE,
    VERSION,
    Kept,
    KeptDevice,
    cleared,
    doubted,
    dumps,
    parse_kept,
    read_kept,
    resume,
)
from ray_accel.core.health_state import (
    HEALTH_FILE,
    HealthSettings,
    HostHealth,
    OnUnhealthy,
    PartitionHealth,
    PartitionState,
    PartState,
    read_health,
)
from ray_accel.core.health_state import VERSION as HEALTH_VERSION
from ray_accel.core.health_state import dumps as health_dumps
from ray_accel.core.health_track import Fault, Findings, Level, advance, start
from ray_accel.health.launch import start_decider
from tests.clirun import run_cli_here
from tests.decider_harness import Spawn, record_of, wait_for
from tests.stand_ins import ray_process
from tests.strategies import D, kept_devices

ECC = "mem_ecc_uncorrected"
EVENT = HealthEvent(D, "ecc", ECC, f"{ECC} grew from 0 to 2", 100.0, True)
FAULT = Fault("ecc", EVENT, sticky=True)
CLEAN = Findings(D, vouched=(ECC,))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
device_like = st.fixed_dictionaries(
    {"device_id": json_values | st.just(D), "since": json_values | st.just(1.0)},
    optional={"faults": json_values, "counters": json_values, "doubt": json_values},
)
files_like = st.fixed_dictionaries(
    {"version": st.just(VERSION) | json_values, "at": st.just(1.0) | json_values},
    optional={"devices": st.lists(device_like, max_size=2) | json_values},
).map(lambda d: json.dumps(d).encode())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode) | files_like)
def test_any_bytes_read_as_unknown_with_why_or_a_valid_state(raw: bytes) -> None:
    kept = parse_kept(raw, "f")
    assert (kept.unknown.startswith("device health unknown: ") and kept.devices == ()) or (
        kept.unknown == "" and all(isinstance(d, KeptDevice) for d in kept.devices)
    )


@settings(max_examples=100, deadline=None)
@given(st.lists(kept_devices, max_size=1), st.floats(0, 1e10))
def test_load_of_dump_is_the_same_state(devices: list[KeptDevice], at: float) -> None:
    kept = parse_kept(dumps(devices, at), "f")
    assert kept == Kept(tuple(devices))


def test_missing_truncated_and_older_files_are_unknown_with_why(tmp_path: Path) -> None:
    missing = read_kept(tmp_path)
    assert missing.unknown == f"device health unknown: no {tmp_path / KEPT_FILE}" and not missing.found
    text = dumps([KeptDevice(device_id=D, since=1.0, faults=(FAULT,), counters={ECC: 2})], 2.0)
    (tmp_path / KEPT_FILE).write_text(text[: len(text) // 2])
    truncated = read_kept(tmp_path)
    assert truncated.found and "is not valid JSON" in truncated.unknown, truncated
    older = json.loads(text) | {"version": VERSION - 1}
    (tmp_path / KEPT_FILE).write_text(json.dumps(older))
    assert f"version {VERSION - 1}; this ray-accel reads version {VERSION}" in read_kept(tmp_path).unknown


def test_an_unknown_file_keeps_what_the_record_had_out_in_doubt_until_cleared() -> None:
    why = "device health unknown: no such file"
    kept = doubted(Kept(unknown=why), ["neuron:3", "neuron:3"], 5.0)
    assert kept == (KeptDevice(device_id="neuron:3", since=5.0, doubt=f"{why}; it was out of service"),)
    assert doubted(Kept((KeptDevice(device_id=D, since=1.0),)), ["neuron:3"], 5.0) == (
        KeptDevice(device_id=D, since=1.0),
    ), "a known file stands"
    (t,) = resume(start(["neuron:3"], 1.0), kept)
    for now in range(10, 15):  # clean polls never end a doubt
        t, _ = advance(t, Findings("neuron:3", vouched=(ECC,)), now, 3)
        assert t.state is Health.UNKNOWN
    (k,) = cleared(kept, "neuron:3")
    assert not k.out


def test_a_resumed_sticky_fault_is_unhealthy_before_any_poll_and_stays() -> None:
    (t,) = resume(start([D], 1.0), [KeptDevice(device_id=D, since=50.0, faults=(FAULT,), counters={ECC: 2})])
    assert (t.state, t.since, t.last_event) == (Health.UNHEALTHY, 50.0, EVENT)
    t, new = advance(t, CLEAN, 60.0, 3)
    assert t.state is Health.UNHEALTHY and new == ()
    level = Fault("lost", HealthEvent(D, "lost", None, "gone", 1.0, True), sticky=False, clean=2, clean_words="present")
    (t,) = resume(start([D], 1.0), [KeptDevice(device_id=D, since=1.0, faults=(level,))])
    t, _ = advance(t, Findings(D, vouched=(ECC,), levels=(Level("lost", None, "present"),)), 2.0, 3)
    assert t.state is Health.HEALTHY, "the clean readings counted before the restart count"


# ---------------------------------------------------------------- the mock's counters


def verdict(report: HealthReport, device_id: str) -> DeviceHealth:
    return next(d for d in report.devices if d.device_id == device_id)


def mock(tmp_path: Path, faults: dict[str, object]) -> MockHealthMonitor:
    path = tmp_path / "faults.json"
    path.write_text(json.dumps(faults))
    return MockHealthMonitor(load_spec("trn1.32xlarge"), {"RAYACCEL_MOCK_FAULTS": str(path)})


def test_a_counter_already_grown_is_a_baseline_for_a_new_monitor_but_not_for_a_resumed_one(tmp_path: Path) -> None:
    first = mock(tmp_path, {"events": [{"device": D, "kind": "ecc", "code": ECC, "count": 2}]})
    report = first.poll()
    assert verdict(report, D).state is Health.UNHEALTHY and report.events[0].code == ECC
    grown = {"counters": {D: {ECC: 2}}}
    forgetful = mock(tmp_path, grown)
    assert verdict(forgetful.poll(), D).state is Health.HEALTHY, "a fresh monitor takes the grown counter as baseline"
    resumed = mock(tmp_path, grown)
    resumed.resume(parse_kept(dumps(first.kept(), 1.0), "f").devices)
    for _ in range(3):
        found = verdict(resumed.poll(), D)
        assert found.state is Health.UNHEALTHY and found.last_event is not None and found.last_event.code == ECC
    resumed.clear(D)
    assert verdict(resumed.poll(), D).state is Health.HEALTHY


def test_a_counter_that_grew_while_no_monitor_ran_is_growth(tmp_path: Path) -> None:
    first = mock(tmp_path, {})
    first.poll()
    later = mock(tmp_path, {"counters": {D: {ECC: 3}}})
    later.resume(first.kept())
    report = later.poll()
    assert verdict(report, D).state is Health.UNHEALTHY and report.events[0].reason == f"{ECC} grew from 0 to 3"


def test_the_fault_files_counters_are_checked() -> None:
    ids, family = ["neuron:0", D], "neuron"
    assert parse_faults(json.dumps({"counters": {D: {ECC: 2}}}), ids, family).counters == {(D, ECC): 2}
    for bad, needle in [
        ({"counters": {"neuron:99": {ECC: 1}}}, "not a device of this mock host"),
        ({"counters": {D: {"xid": 1}}}, "'xid' is not one of"),
        ({"counters": {D: {ECC: -1}}}, "counters.neuron:9.mem_ecc_uncorrected"),
    ]:
        try:
            parse_faults(json.dumps(bad), ids, family)
        except FaultFileError as e:
            assert needle in str(e), e
        else:
            raise AssertionError(f"{bad} was read")


# ---------------------------------------------------------------- clear without a decider


def test_clear_without_a_decider_edits_the_kept_file_under_the_hosts_lock(env: dict[str, str], spawn: Spawn) -> None:
    record = record_of(ray_process(spawn()), HealthSettings())
    statedir.save(record)
    directory = Path(env["RAYACCEL_STATE_DIR"])
    event = HealthEvent("neuron:0", "ecc", ECC, "grew", 1.0, True)
    fault = Fault("ecc", event, sticky=True)
    write_atomic(
        directory / KEPT_FILE,
        dumps([KeptDevice(device_id="neuron:0", since=1.0, faults=(fault,), counters={ECC: 2})], 1.0),
    )
    with statedir.host_lock("test", statedir.place_of(record)):
        proc = run_cli_here("health", "clear", "neuron:0", env=env)
    assert proc.returncode != 0 and "lock" in proc.stderr.lower(), proc.stderr
    assert read_kept(directory).devices[0].faults == (fault,)
    proc = run_cli_here("health", "clear", "neuron:0", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "no health decider runs" in json.loads(proc.stdout)["message"]
    (kept,) = read_kept(directory).devices
    assert kept.faults == () and kept.counters == {ECC: 2}, "the baseline stays"


# ---------------------------------------------------------------- plan and start


def test_plan_leaves_a_device_out_of_service_out_of_its_partition_and_says_so(tmp_path: Path) -> None:
    environ = {"RAYACCEL_MOCK": "trn1.32xlarge", "RAYACCEL_STATE_DIR": str(tmp_path)}
    write_atomic(
        tmp_path / KEPT_FILE, dumps([KeptDevice(device_id=D, since=1.0, faults=(FAULT,), counters={ECC: 2})], 1.0)
    )
    proc = run_cli_here("plan", "--partitions", "2", "--json", env=environ)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["out_of_service"]
    assert out == [{"device": D, "partition": "p1", "reason": EVENT.reason}]
    assert f"{D} is out of service ({EVENT.reason}): p1 starts without it" in proc.stderr
    (tmp_path / KEPT_FILE).write_text("{")
    proc = run_cli_here("plan", "--partitions", "2", "--json", env=environ)
    assert json.loads(proc.stdout)["out_of_service"] == [] and "device health unknown" in proc.stderr


def test_plan_on_unreadable_kept_health_leaves_what_the_last_health_report_had_out_out(tmp_path: Path) -> None:
    """After `stop`, no record says what was out: where devices.json cannot be
    read, the last health.json does (a device is never healthy for want of a file)."""
    environ = {"RAYACCEL_MOCK": "trn1.32xlarge", "RAYACCEL_STATE_DIR": str(tmp_path)}
    text = dumps([KeptDevice(device_id=D, since=1.0, faults=(FAULT,), counters={ECC: 2})], 1.0)
    (tmp_path / KEPT_FILE).write_text(text[: len(text) // 2])
    p1 = tuple(f"neuron:{i}" for i in range(8, 16))
    shrunk = PartitionHealth(
        partition="p1",
        state=PartState.SHRUNK,
        since=1.0,
        devices=tuple(d for d in p1 if d != D),
        out=(D,),
        node_id="n",
        detail=f"without {D}",
    )
    write_atomic(
        tmp_path / HEALTH_FILE,
        health_dumps(
            HostHealth(at=1.0, settings=HealthSettings(action=OnUnhealthy.SHRINK), devices=(), partitions=(shrunk,))
        ),
    )
    proc = run_cli_here("plan", "--partitions", "2", "--json", env=environ)
    assert proc.returncode == 0, proc.stderr
    (out,) = json.loads(proc.stdout)["out_of_service"]
    assert (out["device"], out["partition"]) == (D, "p1")
    assert out["reason"].startswith("device health unknown: ") and out["reason"].endswith("; it was out of service")
    assert "not valid JSON" in out["reason"] and "what the last health report had out stays out" in proc.stderr
    (tmp_path / HEALTH_FILE).write_text("{")
    proc = run_cli_here("plan", "--partitions", "2", "--json", env=environ)
    assert json.loads(proc.stdout)["out_of_service"] == [] and "every device starts in service" in proc.stderr


def test_plan_without_kept_health_leaves_what_the_last_health_report_had_out_out(tmp_path: Path) -> None:
    """devices.json removed, health.json naming a device out: `plan` keeps it out and says why
    (it was put back in service silently)."""
    environ = {"RAYACCEL_MOCK": "trn1.32xlarge", "RAYACCEL_STATE_DIR": str(tmp_path)}
    p1 = tuple(f"neuron:{i}" for i in range(8, 16))
    shrunk = PartitionHealth(
        partition="p1",
        state=PartState.SHRUNK,
        since=1.0,
        devices=tuple(d for d in p1 if d != D),
        out=(D,),
        node_id="n",
        detail=f"without {D}",
    )
    write_atomic(
        tmp_path / HEALTH_FILE,
        health_dumps(
            HostHealth(at=1.0, settings=HealthSettings(action=OnUnhealthy.SHRINK), devices=(), partitions=(shrunk,))
        ),
    )
    assert not (tmp_path / KEPT_FILE).exists()
    proc = run_cli_here("plan", "--partitions", "2", "--json", env=environ)
    assert proc.returncode == 0, proc.stderr
    (out,) = json.loads(proc.stdout)["out_of_service"]
    assert (out["device"], out["partition"]) == (D, "p1")
    assert f"no {tmp_path / KEPT_FILE}" in out["reason"] and out["reason"].endswith("; it was out of service")
    assert "what the last health report had out stays out" in proc.stderr
    # Nothing ever kept and nothing out: every device in service, and nothing said.
    (tmp_path / HEALTH_FILE).unlink()
    proc = run_cli_here("plan", "--partitions", "2", "--json", env=environ)
    assert json.loads(proc.stdout)["out_of_service"] == [] and "device health unknown" not in proc.stderr


def test_a_partition_with_every_device_out_is_refused(tmp_path: Path) -> None:
    environ = {"RAYACCEL_MOCK": "trn1.32xlarge", "RAYACCEL_STATE_DIR": str(tmp_path)}
    devices = [KeptDevice(device_id=f"neuron:{i}", since=1.0, doubt="replaced") for i in range(8, 16)]
    write_atomic(tmp_path / KEPT_FILE, dumps(devices, 1.0))
    proc = run_cli_here("plan", "--partitions", "2", env=environ)
    assert proc.returncode == 2 and "every device of partition p1 is out of service (replaced)" in proc.stderr


def test_clear_after_stop_edits_the_kept_file_and_names_a_device_not_kept(env: dict[str, str]) -> None:
    directory = Path(env["RAYACCEL_STATE_DIR"])
    proc = run_cli_here("health", "clear", "neuron:0", env=env)
    assert proc.returncode == 1 and "no cluster" in proc.stderr, "nothing kept, nothing recorded"
    directory.mkdir(mode=0o700)
    event = HealthEvent("neuron:0", "ecc", ECC, "grew", 1.0, True)
    write_atomic(
        directory / KEPT_FILE,
        dumps([KeptDevice(device_id="neuron:0", since=1.0, faults=(Fault("ecc", event, True),))], 1.0),
    )
    proc = run_cli_here("health", "clear", "neuron:7", env=env)
    assert proc.returncode == 2 and "'neuron:7' is not one whose health is kept here (devices: neuron:0)" in proc.stderr
    proc = run_cli_here("health", "clear", "neuron:0", env=env)
    assert proc.returncode == 0 and "from the next `ray-accel start`" in proc.stdout, proc.stderr
    assert not read_kept(directory).devices[0].out


# ---------------------------------------------------------------- a decider resuming from a file it cannot read


@pytest.mark.parametrize("damage", ["previous version", "truncated"])
def test_a_decider_resuming_from_an_unreadable_file_keeps_the_record_s_out_devices_out_unknown_with_why(
    env: dict[str, str],
    spawn: Spawn,
    monkeypatch: pytest.MonkeyPatch,
    damage: str,
) -> None:
    """The real decider process, started on a record whose p0 serves neuron:0
    and has neuron:1 out (shrunk); the devices.json that said why is of the
    previous version (beside that version's health.json) or cut short."""
    monkeypatch.setenv("RAYACCEL_MOCK", "trn1.32xlarge")
    env = {**env, "RAYACCEL_MOCK": "trn1.32xlarge"}
    record = record_of(
        ray_process(spawn()), HealthSettings(action=OnUnhealthy.SHRINK, interval_s=0.2, drain_deadline_s=600.0)
    )
    shrunk = PartitionState(PartState.SHRUNK, record.created, "without neuron:1: mem_ecc_uncorrected grew")
    p0 = replace(
        record.partitions[0],
        device_ids=("neuron:0", "neuron:1"),
        core_ids=(0, 1, 2, 3),
        out=("neuron:1",),
        out_core_ids=(2, 3),
        health=shrunk,
    )
    record = record.with_partitions([p0])
    directory = statedir.place_of(record).directory
    statedir.save(record)
    fault = Fault("ecc", HealthEvent("neuron:1", "ecc", ECC, f"{ECC} grew from 0 to 2", 1.0, True), sticky=True)
    text = dumps([KeptDevice(device_id="neuron:1", since=1.0, faults=(fault,), counters={ECC: 2})], 1.0)
    if damage == "truncated":
        (directory / KEPT_FILE).write_text(text[: len(text) // 2])
        why = "is not valid JSON"
    else:
        (directory / KEPT_FILE).write_text(json.dumps(json.loads(text) | {"version": VERSION - 1}))
        (directory / HEALTH_FILE).write_text(json.dumps({"version": HEALTH_VERSION - 1, "devices": []}))
        why = f"version {VERSION - 1}; this ray-accel reads version {VERSION}"
    record = start_decider(record, lambda m: None)
    wait_for(lambda: (h := read_health(directory)) is not None and h.polls >= 3)

    shown = json.loads(run_cli_here("health", "--json", env=env).stdout)
    devices = {d["device_id"]: d for d in shown["devices"]}
    assert devices["neuron:0"]["state"] == "healthy"
    gone = devices["neuron:1"]
    assert gone["state"] == "unknown", gone
    assert "device health unknown" in gone["healthy_again"] and why in gone["healthy_again"], gone
    assert "it was out of service" in gone["healthy_again"]
    (part,) = shown["partitions"]
    assert (part["state"], part["out"]) == ("shrunk", ["neuron:1"]), part
    assert why in (directory / "decider.log").read_text()
    # What the decider keeps now says so too: a later restart still has it out.
    assert list(read_kept(directory).out()) == ["neuron:1"]
    assert statedir.load(statedir.place_of(record)).partitions[0].out == ("neuron:1",)  # type: ignore[union-attr]
    stopped = run_cli_here("stop", "--json", env=env)
    assert stopped.returncode == 0, stopped.stderr
