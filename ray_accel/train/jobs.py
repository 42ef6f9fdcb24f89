"""Feeding the job store from Ray Train V2's controller.

The seam is Ray Train V2's `ControllerCallback` (a DeveloperAPI,
ray/train/v2/_internal/execution/callback.py:115-181 in Ray 2.60), which runs
inside the controller actor and sees every controller state change. A
TorchConfig cannot attach one; Ray Train builds the callbacks named in the
driver's `RAY_TRAIN_CALLBACKS` (comma-separated import paths of classes built
with no arguments, ray/train/v2/_internal/callbacks/env_callback.py:9-39, read
at every `fit()`, api/data_parallel_trainer.py:207). `AcceleratorTorchConfig`
adds `JobCallback` there when it is made. The variable is process-wide, so the
callback stays inert for a run whose backend config is not ours.

The backend's `on_start` (run by Ray Train in the same controller process,
once per attempt, after the workers are placed) sends the replicas.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ray.train.v2._internal.execution.callback import ControllerCallback

from ray_accel.jobs import model, store

CALLBACKS_ENV = "RAY_TRAIN_CALLBACKS"
CALLBACK_PATH = "ray_accel.train.jobs.JobCallback"


def register_callback(environ: Any = None) -> None:
    """Name `JobCallback` in this process's `RAY_TRAIN_CALLBACKS` (once)."""
    env = os.environ if environ is None else environ
    names = [n.strip() for n in env.get(CALLBACKS_ENV, "").split(",") if n.strip()]
    if CALLBACK_PATH not in names:
        env[CALLBACKS_ENV] = ",".join([*names, CALLBACK_PATH])


def allowed_workers(num_workers: Any) -> tuple[int, int]:
    """(min, max) from `ScalingConfig.num_workers`: an int, or (min, max) when elastic."""
    if isinstance(num_workers, tuple | list) and len(num_workers) == 2:
        return int(num_workers[0]), int(num_workers[1])
    return int(num_workers), int(num_workers)


def replica_rows(expected: Sequence[Mapping[str, int]], infos: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per worker (world-rank order) for the store's STARTING event."""
    return [
        {
            **ranks,
            "host": info.get("host", ""),
            "partition": info.get("partition"),
            "node_id": info.get("node_id", ""),
            "devices": list(info.get("ids", [])),
            "pid": info.get("pid", 0),
        }
        for ranks, info in zip(expected, infos, strict=True)
    ]


def on_start(backend_config: Any, rows: list[dict[str, Any]]) -> None:
    store.send(model.STARTING, backend_config.run_id, {"replicas": rows})


class JobCallback(ControllerCallback):
    """Sends the controller's start and state changes of an
    `AcceleratorTorchConfig` run to the job store."""

    def __init__(self) -> None:
        self.job_id: str | None = None
        self.last: str | None = None

    def after_controller_start(self, train_run_context: Any) -> None:
        from ray_accel.train.config import AcceleratorTorchConfig

        config = getattr(train_run_context, "backend_config", None)
        if not isinstance(config, AcceleratorTorchConfig):
            return
        import ray

        self.job_id = config.run_id
        lo, hi = allowed_workers(train_run_context.scaling_config.num_workers)
        run_config = getattr(train_run_context, "run_config", None)
        store.send(
            model.SUBMITTED,
            self.job_id,
            {
                "name": getattr(run_config, "name", None) or self.job_id,
                "ray_run_id": getattr(train_run_context, "run_id", ""),
                "min_workers": lo,
                "max_workers": hi,
                "controller": ray.get_runtime_context().get_actor_id(),
            },
        )

    def after_controller_state_update(self, previous_state: Any, current_state: Any) -> None:
        if self.job_id is None:
            return
        kind = getattr(current_state, "_state_type", None)
        name = str(getattr(kind, "state_name", type(current_state).__name__))
        if name == self.last:
            return  # Ray calls this on every poll (RUNNING -> RUNNING)
        self.last = name
        error = getattr(current_state, "training_failed_error", None)
        final = bool(getattr(kind, "is_terminal", False))
        data = {"state": name, "detail": str(error) if error else ""}
        store.send(model.STATE, self.job_id, data, at=time.time(), wait_s=10.0 if final else 0.0)
