"""`JobCallback`: Ray Train V2's controller tells the job store about an
`AcceleratorTorchConfig` run (named in `RAY_TRAIN_CALLBACKS` by
`ray_accel.train.jobs.register_callback`; Ray Train imports this module in
the controller)."""

from __future__ import annotations

import time
from typing import Any

from ray_accel.jobs import model, store
from ray_accel.rayapi import train as rayapi_train
from ray_accel.train.config import AcceleratorTorchConfig
from ray_accel.train.jobs import allowed_workers

# Ray Train V2's `ControllerCallback`; `register_callback` names this module
# only where the running Ray has it.
_ControllerCallback: Any = rayapi_train.controller_callback_base()


class JobCallback(_ControllerCallback):
    """Sends the controller's start and state changes of an
    `AcceleratorTorchConfig` run to the job store."""

    def __init__(self) -> None:
        self.job_id: str | None = None
        self.last: str | None = None

    def after_controller_start(self, train_run_context: Any) -> None:
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
            model.Submitted(
                name=getattr(run_config, "name", None) or self.job_id,
                ray_run_id=getattr(train_run_context, "run_id", ""),
                min_workers=lo,
                max_workers=hi,
                controller=ray.get_runtime_context().get_actor_id(),
            ),
        )

    def after_controller_state_update(self, previous_state: Any, current_state: Any) -> None:
        if self.job_id is None:
            return
        state = rayapi_train.controller_state(current_state)
        if state.name == self.last:
            return  # Ray calls this on every poll (RUNNING -> RUNNING)
        self.last = state.name
        data = model.StateChange(state.name, state.error)
        store.send(model.STATE, self.job_id, data, at=time.time(), wait_s=10.0 if state.terminal else 0.0)
