"""Ray Train's controller callback without a cluster: what it sends the job
store for an `AcceleratorTorchConfig` run (and nothing for another run), and
that a state Ray reports on every poll is sent once."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import ray

from ray_accel.jobs import model, store
from ray_accel.train.callback import JobCallback
from ray_accel.train.config import AcceleratorTorchConfig


def controller_state(name: str, terminal: bool = False, error: str | None = None) -> Any:
    """A controller state as Ray Train V2 gives it: its type record, and the failure of an errored run."""
    return SimpleNamespace(
        _state_type=SimpleNamespace(state_name=name, is_terminal=terminal), training_failed_error=error
    )


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, object, float]]:
    out: list[tuple[str, str, object, float]] = []

    def send(kind: str, job_id: str, data: object, at: float | None = None, wait_s: float = 0.0) -> None:
        out.append((kind, job_id, data, wait_s))

    monkeypatch.setattr(store, "send", send)
    monkeypatch.setattr(ray, "get_runtime_context", lambda: SimpleNamespace(get_actor_id=lambda: "ctl-1"))
    return out


def test_a_run_of_another_config_is_not_recorded(sent: list[tuple[str, str, object, float]]) -> None:
    cb = JobCallback()
    cb.after_controller_start(SimpleNamespace(backend_config=object()))
    cb.after_controller_state_update(None, controller_state("RUNNING"))
    assert sent == [] and cb.job_id is None


def test_a_run_is_submitted_then_each_new_state_sent_once_the_last_waited_for(
    sent: list[tuple[str, str, object, float]],
) -> None:
    cb = JobCallback()
    context = SimpleNamespace(
        backend_config=AcceleratorTorchConfig(run_id="run1"),
        scaling_config=SimpleNamespace(num_workers=(2, 4)),
        run_config=SimpleNamespace(name="train-a"),
        run_id="ray-run-9",
    )
    cb.after_controller_start(context)
    for state in ("SCHEDULING", "RUNNING", "RUNNING", "RUNNING"):
        cb.after_controller_state_update(None, controller_state(state))
    cb.after_controller_state_update(None, controller_state("ERRORED", terminal=True, error="worker 3 died"))
    assert sent == [
        (model.SUBMITTED, "run1", model.Submitted("train-a", "ray-run-9", 2, 4, "ctl-1"), 0.0),
        (model.STATE, "run1", model.StateChange("SCHEDULING", ""), 0.0),
        (model.STATE, "run1", model.StateChange("RUNNING", ""), 0.0),
        (model.STATE, "run1", model.StateChange("ERRORED", "worker 3 died"), 10.0),
    ]


def test_an_unnamed_run_is_named_by_its_id(sent: list[tuple[str, str, object, float]]) -> None:
    context = SimpleNamespace(
        backend_config=AcceleratorTorchConfig(run_id="run2"), scaling_config=SimpleNamespace(num_workers=3)
    )
    JobCallback().after_controller_start(context)
    assert sent == [(model.SUBMITTED, "run2", model.Submitted("run2", "", 3, 3, "ctl-1"), 0.0)]
