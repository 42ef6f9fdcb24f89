"""`ray-accel jobs` without a cluster, and the pure parts of its output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ray_accel.cli.jobs import find_job, job_text, jobs_text
from ray_accel.core.errors import InputError
from ray_accel.jobs.model import (
    STARTING,
    STATE,
    SUBMITTED,
    Event,
    JobRecord,
    Replica,
    Started,
    StateChange,
    Submitted,
)
from ray_accel.train.jobs import CALLBACK_PATH, allowed_workers, register_callback
from tests.clirun import run_cli_here
from tests.unit.test_jobs_model import apply_all


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
