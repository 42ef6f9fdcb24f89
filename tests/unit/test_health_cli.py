"""The health decider as a process and `ray-accel health` at the command
line, without Ray: a host record whose raylet is a stand-in (`sleep` run
under the path of Ray's raylet binary, as in test_cluster_safety), the real
decider process polling the mock backend's monitor, `stop` stopping the
decider first and by PID. What each needs of Ray (a drain, a restart) is in
the integration tests."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from ray_accel.cluster import procs, statedir
from ray_accel.cluster.record import DECIDER_KIND, RecordError, dumps, parse_record
from ray_accel.core.health import DeviceHealth, Health
from ray_accel.core.health_state import HealthSettings, OnUnhealthy, PartitionState, PartState, read_health
from ray_accel.health import rules
from ray_accel.health.launch import start_decider
from ray_accel.jobs.model import JobRecord, Phase, Replica, Transition, job_notes
from tests.badinput import badinput
from tests.clirun import run_cli_here
from tests.decider_harness import Spawn, record_of, wait_for
from tests.stand_ins import ray_process


def test_no_cluster_is_exit_1_and_an_unknown_device_exit_2(env: dict[str, str]) -> None:
    proc = run_cli_here("health", "--json", env=env)
    assert proc.returncode == 1 and json.loads(proc.stderr)["error"].startswith("no cluster"), proc.stderr
    proc = run_cli_here("health", "clear", "neuron:0", env=env)
    assert proc.returncode == 1 and "no cluster" in proc.stderr


def _unreadable_state_dir(tmp_path: Path, kind: str) -> Path:
    """A state folder that cannot be read, as each way makes one: a name too
    long for the file system and a path through a regular file fail for root
    too; a folder of mode 0000 fails for any other user."""
    if kind == "name too long":
        return tmp_path / ("x" * 300)
    if kind == "through a file":
        (tmp_path / "file").write_text("")
        return tmp_path / "file" / "sub"
    folder = tmp_path / "locked"
    folder.mkdir(mode=0o000)
    return folder


@badinput("traceback")
@pytest.mark.parametrize(
    "kind",
    [
        "name too long",
        "through a file",
        pytest.param(
            "mode 0000",
            marks=pytest.mark.skipif(os.geteuid() == 0, reason="root reads a folder of mode 0000"),
        ),
    ],
)
@pytest.mark.parametrize("as_json", [False, True])
def test_health_clear_on_a_state_folder_it_may_not_read_is_exit_2_naming_it(
    env: dict[str, str], tmp_path: Path, kind: str, as_json: bool
) -> None:
    directory = _unreadable_state_dir(tmp_path, kind)
    unreadable = {**env, "RAYACCEL_STATE_DIR": str(directory)}
    flags = ["--json"] if as_json else []
    try:
        for command in (["health", "clear", "neuron:0"], ["health"], ["status"]):
            proc = run_cli_here(*command, *flags, env=unreadable)
            assert proc.returncode == 2, (command, proc.returncode, proc.stderr)
            assert "Traceback" not in proc.stderr and proc.stdout == ""
            message = json.loads(proc.stderr)["error"] if as_json else proc.stderr
            assert str(directory) in message, (command, message)
    finally:
        if kind == "mode 0000":
            directory.chmod(0o700)


@badinput("exit-code")
def test_the_decider_polls_reports_clears_and_is_stopped_first(env: dict[str, str], spawn: Spawn) -> None:
    raylet = spawn()
    settings = HealthSettings(action=OnUnhealthy.REPORT, interval_s=0.2, drain_deadline_s=5.0)
    record = record_of(ray_process(raylet), settings)
    statedir.save(record)
    record = start_decider(record, lambda m: None)
    assert record.decider is not None and record.decider.kind == DECIDER_KIND
    assert procs.check(record.decider).ours, "recorded by PID, start time and identity"
    place = statedir.place_of(record)
    health = read_health(place.directory)
    assert health is not None and health.polls >= 1
    assert [d.device_id for d in health.devices] == ["neuron:0"] and health.devices[0].state.value == "healthy"

    # An injected fatal event, reported only: every command names the device and the event.
    Path(env["RAYACCEL_MOCK_FAULTS"]).write_text(
        json.dumps({"events": [{"device": "neuron:0", "kind": "ecc", "code": "mem_ecc_uncorrected"}]})
    )
    wait_for(lambda: (h := read_health(place.directory)) is not None and h.devices[0].state.value == "unhealthy")
    shown = json.loads(run_cli_here("health", "--json", env=env).stdout)
    (dev,) = shown["devices"]
    assert dev["partition"] == "p0" and dev["last_event"]["kind"] == "ecc" and shown["decider"]["alive"]
    assert shown["counters"] == {"neuron:0": {"ecc:mem_ecc_uncorrected": 1}}
    (part,) = shown["partitions"]
    assert part["state"] == "serving" and "neuron:0" in part["detail"], "report: named, scheduling untouched"
    text = run_cli_here("status", env=env).stdout
    assert "neuron:0 unhealthy" in text and "--on-unhealthy report" in text

    # A clear of an unknown device is refused naming it, and leaves no request.
    bad = run_cli_here("health", "clear", "neuron:99", "--json", env=env)
    assert bad.returncode == 2 and "neuron:99" in json.loads(bad.stderr)["error"]
    assert (
        not list((place.directory / "health-requests").glob("clear-*"))
        if (place.directory / "health-requests").exists()
        else True
    )
    ok = run_cli_here("health", "clear", "neuron:0", env=env)
    assert ok.returncode == 0, ok.stderr
    wait_for(lambda: (h := read_health(place.directory)) is not None and h.devices[0].state.value == "healthy")

    # `stop` stops the decider first, then the raylet; nothing is left.
    decider = record.decider
    stopped = run_cli_here("stop", "--json", env=env)
    assert stopped.returncode == 0, stopped.stderr
    assert decider.pid in json.loads(stopped.stdout)["pids"] and raylet.pid in json.loads(stopped.stdout)["pids"]
    assert not procs.check(decider).ours and statedir.load(place) is None


def test_the_decider_ends_with_its_record_and_says_so(env: dict[str, str], spawn: Spawn) -> None:
    raylet = spawn()
    record = start_decider(
        record_of(ray_process(raylet), HealthSettings(action=OnUnhealthy.SHRINK, interval_s=0.2, drain_deadline_s=5.0)),
        lambda m: None,
    )
    assert record.decider is not None
    place = statedir.place_of(record)
    statedir.save(replace(record, created=record.created + 1))  # another start's record now
    wait_for(lambda: not procs.check(record.decider).ours)  # type: ignore[arg-type]
    assert "another start's: exiting" in (place.directory / "decider.log").read_text()


def test_a_record_without_health_settings_starts_no_decider(env: dict[str, str], spawn: Spawn) -> None:
    record = record_of(ray_process(spawn()), None)
    statedir.save(record)
    assert start_decider(record, lambda m: None).decider is None
    status = json.loads(run_cli_here("status", "--json", env=env).stdout)
    assert status["health"] is None


@badinput("traceback")
@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda p: p.update(out=["neuron:7"]), "partitions[0].out"),
        (lambda p: p.update(out_core_ids=[9]), "partitions[0].out_core_ids"),
        (lambda p: p.update(health={"state": "resting"}), "partitions[0].health.state"),
        # A record of an earlier version: its `decider_state` is read, and checked.
        (lambda p: (p.pop("health"), p.update(decider_state="resting")), "partitions[0].decider_state"),
    ],
)
def test_a_record_with_bad_health_fields_is_refused_naming_them(
    env: dict[str, str], spawn: Spawn, change: object, needle: str
) -> None:
    data = json.loads(dumps(record_of(ray_process(spawn()), HealthSettings())))
    change(data["partitions"][0])  # type: ignore[operator]
    if "decider_state" in data["partitions"][0]:
        data["version"] = 4  # the last version that wrote `decider_state`: read by its upgrade
    with pytest.raises(RecordError, match="host.json") as e:
        parse_record(json.dumps(data), "host.json")
    assert needle in str(e.value)


@badinput("traceback")
def test_a_decider_of_another_kind_or_bad_settings_is_refused(env: dict[str, str], spawn: Spawn) -> None:
    record = record_of(ray_process(spawn()), HealthSettings())
    data = json.loads(dumps(replace(record, decider=ray_process(os.getpid(), kind="raylet"))))
    with pytest.raises(RecordError, match="decider.kind"):
        parse_record(json.dumps(data), "host.json")
    data = json.loads(dumps(record))
    data["health"]["action"] = "explode"
    with pytest.raises(RecordError, match="health.action"):
        parse_record(json.dumps(data), "host.json")
    data["health"] = None
    assert parse_record(json.dumps(data), "host.json").health is None, "a record from before: no decider"


def test_a_shrunk_entry_serves_its_devices_but_keeps_its_plan(env: dict[str, str], spawn: Spawn) -> None:
    record = record_of(ray_process(spawn()), HealthSettings())
    p = replace(record.partitions[0], device_ids=("neuron:0", "neuron:1"), core_ids=(0, 1, 2, 3))
    shrunk = replace(p, out=("neuron:1",), out_core_ids=(2, 3))
    assert shrunk.serving.device_ids == ("neuron:0",) and shrunk.serving.core_ids == (0, 1)
    assert shrunk.visible_ids == "0,1" and shrunk.partition.core_ids == (0, 1, 2, 3)
    back = parse_record(dumps(record.with_partitions([shrunk])), "host.json").partitions[0]
    assert back == shrunk


def test_a_partition_state_is_kept_in_the_record_and_an_earlier_decider_state_is_read(
    env: dict[str, str], spawn: Spawn
) -> None:
    record = record_of(ray_process(spawn()), HealthSettings())
    held = PartitionState(PartState.RESTORING, 5.0, "drained to restart with 2 of 2 devices", 15.0, ("neuron:0",))
    draining = replace(record.partitions[0], health=held)
    back = parse_record(dumps(record.with_partitions([draining])), "host.json").partitions[0]
    assert back.health == held and back.held
    data = json.loads(dumps(record))
    assert data["partitions"][0]["health"]["state"] == "serving" and "decider_state" not in data["partitions"][0]
    data["version"] = 4  # a partition without `health` is a version 4's shape, read by its upgrades
    for old in ("stopped", "restarting"):
        del data["partitions"][0]["health"]
        data["partitions"][0]["decider_state"] = old
        p = parse_record(json.dumps(data), "host.json").partitions[0]
        assert p.health.state is PartState.STOPPED and old in p.health.detail and p.held
        data["partitions"][0] = json.loads(dumps(record))["partitions"][0]
    del data["partitions"][0]["health"]
    assert parse_record(json.dumps(data), "host.json").partitions[0].health == PartitionState()


def test_a_decider_identity_is_exactly_its_module() -> None:
    assert procs.is_ray_process(DECIDER_KIND, "-m ray_accel.health.decider")
    assert not procs.is_ray_process(DECIDER_KIND, "-m ray.something")
    assert not procs.is_ray_process(DECIDER_KIND, "/usr/bin/python")


def test_a_waiting_job_names_the_partition_it_waits_for() -> None:
    from ray_accel.core.health_state import HostHealth, PartitionHealth, PartState

    h = HostHealth(
        at=1.0,
        settings=HealthSettings(action=OnUnhealthy.SHRINK),
        devices=(),
        partitions=(
            PartitionHealth(
                partition="p0",
                state=PartState.SERVING,
                since=1.0,
                devices=("neuron:0",),
                out=(),
                node_id="a",
                detail="",
            ),
            PartitionHealth(
                partition="p1",
                state=PartState.DRAINING,
                since=1.0,
                devices=("neuron:1",),
                out=("neuron:1",),
                node_id="b",
                detail="neuron:1: XID 79",
            ),
        ),
    )

    def job(job_id: str, phase: Phase, *where: tuple[str, str]) -> JobRecord:
        rows = tuple(
            Replica(
                world_rank=0,
                world_size=1,
                local_rank=0,
                local_world_size=1,
                node_rank=0,
                host=host,
                partition=p,
                node_id="n",
                devices=(),
                pid=1,
            )
            for host, p in where
        )
        return JobRecord(
            id=job_id,
            name=job_id,
            ray_run_id="",
            submitted_at=0.0,
            min_workers=1,
            max_workers=1,
            transitions=(Transition(phase, 0.0),),
            replicas=rows,
        )

    jobs = [
        job("a", Phase.RESTARTING, ("host_1.2.3.4", "p0"), ("host_1.2.3.4", "p1")),
        job("b", Phase.RUNNING, ("host_1.2.3.4", "p1")),
        job("c", Phase.RESTARTING, ("other_5.6.7.8", "p1")),
    ]
    assert job_notes(jobs, h, "host_1.2.3.4") == {"a": "p1 draining: neuron:1: XID 79"}
    assert job_notes(jobs, None, "host_1.2.3.4") == {}


def test_a_step_reads_back_from_the_record_as_the_rules_left_it() -> None:
    full = tuple(f"neuron:{i}" for i in range(4))
    record = record_of(
        ray_process(os.getpid()), HealthSettings(action=OnUnhealthy.SHRINK, interval_s=1.0, drain_deadline_s=10.0)
    )
    p = replace(record.partitions[0], device_ids=full, core_ids=(0, 1, 2, 3), node_id="ab12")
    record = record.with_partitions([p])
    view = rules.view_of(record, p)
    assert (view.state, view.since, view.devices, view.out) == (PartState.SERVING, record.created, full, ())
    bad = {d: DeviceHealth(d, Health.UNHEALTHY if d == "neuron:2" else Health.HEALTHY, 1.0, None, "") for d in full}
    drain = rules.decide(
        HealthSettings(action=OnUnhealthy.SHRINK, interval_s=1.0, drain_deadline_s=10.0),
        view,
        rules.Facts(full, True, bad),
        5.0,
    )
    draining = replace(p, health=drain.view.held)
    assert drain.effect is rules.Effect.DRAIN and rules.view_of(record, draining) == drain.view
    assert drain.view.out == ("neuron:2",) and drain.view.devices == full, "it serves them all until the restart"
    restart = rules.decide(
        HealthSettings(action=OnUnhealthy.SHRINK, interval_s=1.0, drain_deadline_s=10.0),
        drain.view,
        rules.Facts(full, False, bad),
        6.0,
    )
    # As the actions leave it: its raylet new, without the device.
    shrunk = replace(p, health=restart.view.held, out=("neuron:2",), out_core_ids=(2,), node_id="cd34")
    assert rules.view_of(record, shrunk) == replace(restart.view, node_id="cd34")
