"""`ray-accel jobs` without a cluster, and the pure parts of its output."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import click
import pytest

from ray_accel.cli.jobs import find_job, job_text, jobs_text, top_jobs
from ray_accel.cluster.host import this_host
from ray_accel.core.errors import InputError, RayAccelError
from ray_accel.core.health_state import HealthSettings, HostHealth, PartitionHealth, PartState
from ray_accel.jobs.model import (
    STARTING,
    STATE,
    SUBMITTED,
    Event,
    JobRecord,
    Phase,
    Replica,
    Started,
    StateChange,
    Submitted,
    Transition,
)
from ray_accel.train.jobs import CALLBACK_PATH, allowed_workers, register_callback
from tests.clirun import run_cli_here
from tests.jobs_events import apply_all


def _job() -> JobRecord:
    rows = (
        Replica(
            world_rank=0,
            world_size=1,
            local_rank=0,
            local_world_size=1,
            node_rank=0,
            host="h",
            partition="p0",
            node_id="n0",
            devices=("0", "1"),
            pid=7,
        ),
    )
    events = [
        Event(SUBMITTED, "abc123", 10.0, Submitted("train-a", min_workers=1, max_workers=2)),
        Event(STARTING, "abc123", 11.0, Started(rows, "gloo", "no stack")),
        Event(STATE, "abc123", 12.0, StateChange("RUNNING")),
    ]
    return apply_all(events)["abc123"]


def test_jobs_without_a_recorded_cluster_says_no_cluster_and_exits_1(tmp_path: Path) -> None:
    env = {"RAYACCEL_STATE_DIR": str(tmp_path / "state"), "RAYACCEL_MOCK": "trn1.32xlarge"}
    proc = run_cli_here("jobs", "--json", env=env)
    assert proc.returncode == 1 and "no cluster" in json.loads(proc.stderr)["error"]
    proc = run_cli_here("jobs", "show", "x", env=env)
    assert proc.returncode == 1 and "no cluster" in proc.stderr


def test_an_unknown_job_id_is_an_input_error_naming_it() -> None:
    job = _job()
    assert find_job([job], "abc") is job and find_job([job], "train-a") is job
    with pytest.raises(InputError, match="'nope'.*abc123"):
        find_job([job], "nope")


def test_text_views_show_phase_sizes_and_replicas() -> None:
    job = _job()
    listing = jobs_text([job], {"abc123": "p0 draining"}, now=20.0)
    assert "abc123" in listing and "Running" in listing and "1 (1-2)" in listing and "h/p0" in listing
    shown = job_text(job, now=20.0)
    assert "allowed 1..2" in shown and "Pending (+0.0s) -> Starting (+1.0s) -> Running (+2.0s)" in shown
    assert "Starting -> Running" in shown and "0,1" in shown
    assert "collective: gloo (no stack)" in shown and "waits" not in shown
    assert "abc123 waits: p0 draining" in listing and "waits: p0 draining" in job_text(job, {"abc123": "p0 draining"})
    assert jobs_text([]) == "no jobs"


def test_the_callback_is_named_once_and_after_what_was_there() -> None:
    env = {"RAY_TRAIN_CALLBACKS": "a.B"}
    register_callback(env)
    register_callback(env)
    assert env["RAY_TRAIN_CALLBACKS"] == f"a.B,{CALLBACK_PATH}"
    assert allowed_workers(3) == (3, 3) and allowed_workers((2, 4)) == (2, 4)


def test_the_named_callback_is_ray_trains_controller_callback() -> None:
    """What Ray Train imports from `RAY_TRAIN_CALLBACKS` is a `ControllerCallback`."""
    import importlib

    from ray.train.v2._internal.execution.callback import ControllerCallback

    module, _, name = CALLBACK_PATH.rpartition(".")
    assert issubclass(getattr(importlib.import_module(module), name), ControllerCallback)


def test_without_the_callback_class_no_callback_is_named(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A Ray without Train V2's ControllerCallback: naming ours would make
    Ray Train fail to import it, so nothing is named and the warning says
    what is lost and what is missing."""
    import sys

    monkeypatch.setitem(sys.modules, "ray.train.v2._internal.execution.callback", None)
    env = {"RAY_TRAIN_CALLBACKS": "a.B"}
    with caplog.at_level("WARNING", logger="ray_accel.train.jobs"):
        register_callback(env)
    assert env == {"RAY_TRAIN_CALLBACKS": "a.B"}
    assert "has no module ray.train.v2._internal.execution.callback" in caplog.text
    assert "not recorded as jobs" in caplog.text


# `ray-accel jobs` and `jobs show` against a cluster that is stood in for:
# the store, the host's record and its health are replaced where they are read.
# Also the CLI's exit codes for a click error or an interrupt inside a command.
IP = "10.1.2.3"


RECORD = SimpleNamespace(host_ip=IP)  # what top_jobs reads of the host record


def _listed_job(job_id: str, name: str, phase: Phase, partition: str, detail: str = "") -> JobRecord:
    rows = (
        Replica(
            world_rank=0,
            world_size=1,
            local_rank=0,
            local_world_size=1,
            node_rank=0,
            host=this_host(IP).key,
            partition=partition,
            node_id="n0",
            devices=("0",),
            pid=7,
        ),
    )
    return JobRecord(
        id=job_id,
        name=name,
        ray_run_id="",
        submitted_at=5.0,
        min_workers=1,
        max_workers=1,
        transitions=(Transition(phase, 5.0),),
        replicas=rows,
        detail=detail,
    )


JOBS = [
    _listed_job("aaa111", "train", Phase.RESTARTING, "p1", "lost a worker"),
    _listed_job("bbb222", "train", Phase.RUNNING, "p0"),
]


HEALTH = HostHealth(
    at=1.0,
    settings=HealthSettings(),
    devices=(),
    partitions=(
        PartitionHealth(
            partition="p0", state=PartState.SERVING, since=1.0, devices=("mock:0",), out=(), node_id="n0", detail=""
        ),
        PartitionHealth(
            partition="p1",
            state=PartState.DRAINING,
            since=1.0,
            devices=("mock:1",),
            out=("mock:1",),
            node_id="n1",
            detail="mock:1: fault",
        ),
    ),
)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A recorded cluster whose store holds JOBS and whose host health is HEALTH; what was connected to."""
    import ray_accel.cli.connect
    import ray_accel.core.health_state
    import ray_accel.jobs.store

    connected: list[str] = []

    def connect() -> tuple[object, dict[str, object]]:
        connected.append("connected")
        return RECORD, {}

    monkeypatch.setattr(ray_accel.cli.connect, "connect_to_recorded_cluster", connect)
    monkeypatch.setattr(ray_accel.jobs.store, "read_jobs", lambda: list(JOBS))
    monkeypatch.setattr(ray_accel.core.health_state, "read_health", lambda directory: HEALTH)
    return connected


def test_jobs_lists_the_store_and_says_why_a_waiting_job_waits(cluster: list[str]) -> None:
    out = json.loads(run_cli_here("jobs", "--json").stdout)["jobs"]
    assert cluster == ["connected"]
    assert [(j["id"], j["waiting"]) for j in out] == [("aaa111", "p1 draining: mock:1: fault"), ("bbb222", None)]
    text = run_cli_here("jobs").stdout
    assert "aaa111 waits: p1 draining: mock:1: fault" in text and "bbb222 waits" not in text


def test_jobs_show_prints_one_job_with_its_replicas(cluster: list[str]) -> None:
    shown = json.loads(run_cli_here("jobs", "show", "aaa", "--json").stdout)
    assert shown["id"] == "aaa111" and shown["waiting"] == "p1 draining: mock:1: fault"
    assert [r["partition"] for r in shown["replicas"]] == ["p1"]
    text = run_cli_here("jobs", "show", "bbb222").stdout
    assert text.startswith("job bbb222 (train): Running") and "waits" not in text
    proc = run_cli_here("jobs", "show", "train")
    assert proc.returncode != 0 and "names 2 jobs (aaa111, bbb222): use an id" in proc.stderr


def test_a_job_shows_its_detail_line() -> None:
    assert "detail: lost a worker" in job_text(JOBS[0], now=6.0)
    assert "detail:" not in job_text(JOBS[1], now=6.0)


def test_a_name_shared_by_two_jobs_is_an_input_error_naming_both() -> None:
    with pytest.raises(InputError, match="'train' names 2 jobs"):
        find_job(JOBS, "train")


def test_without_a_readable_health_file_or_a_node_ip_no_job_is_said_to_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray_accel.core.health_state
    import ray_accel.jobs.store

    monkeypatch.setattr(ray_accel.jobs.store, "read_jobs", lambda: list(JOBS))

    def unreadable(directory: object) -> None:
        raise RayAccelError("health file h.json is not valid JSON")

    monkeypatch.setattr(ray_accel.core.health_state, "read_health", unreadable)
    assert top_jobs(RECORD) == (JOBS, None)  # type: ignore[arg-type]
    monkeypatch.setattr(ray_accel.core.health_state, "read_health", lambda directory: HEALTH)
    assert top_jobs(SimpleNamespace(host_ip=None)) == (JOBS, None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raised", "code", "text"),
    [
        (click.ClickException("no such file"), 1, "ray-accel: failed: no such file"),
        (KeyboardInterrupt(), 130, "ray-accel: failed: interrupted"),
    ],
)
def test_a_command_that_raises_a_click_error_or_is_interrupted_exits_with_its_code(
    raised: BaseException, code: int, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    jobs = importlib.import_module("ray_accel.cli.jobs")  # the package's `jobs` is the command

    def fail() -> None:
        raise raised

    monkeypatch.setattr(jobs, "read_recorded_jobs", fail)
    proc = run_cli_here("jobs")
    assert proc.returncode == code and proc.stderr.strip() == text
    assert '"exit_code": ' + str(code) in run_cli_here("jobs", "--json").stderr
