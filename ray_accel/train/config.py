"""`AcceleratorTorchConfig`: pass it as `TorchTrainer(torch_config=...)`."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ray.train.torch.config import TorchConfig

from ray_accel.core.errors import InputError
from ray_accel.hooks.ledger import HookFactory


@dataclass
class AcceleratorTorchConfig(TorchConfig):
    """Distributed torch inside ray-accel partitions.

    backend: "auto" (each worker's backend runtime decides; gloo for a worker
        without devices), "gloo", or a collective an installed backend
        declares (`DevicePlugin.collectives`); anything else is refused,
        naming the accepted ones.
    hooks: LifecycleHook classes (or factories taking a Workload) run around
        every worker: pre_create, post_create, pre_terminate, post_terminate.
    pre_terminate_timeout_s: bound on the pre_terminate hooks.
    timeout_s: (TorchConfig's) bound on making the process group.
    init_method: (TorchConfig's) "env" only; anything else is refused.
    run_id: names this run's hook ledger and its job (`ray-accel jobs`); the
        same across restarts of one fit().
    """

    backend: str | None = "auto"
    hooks: Sequence[HookFactory] = ()
    pre_terminate_timeout_s: float = 30.0
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def __post_init__(self) -> None:
        from ray_accel.train.backend import accepted_backends

        accepted = accepted_backends()
        if self.backend not in accepted:
            raise InputError(
                f"backend {self.backend!r}: use one of {', '.join(accepted)} "
                "(auto, gloo, and the collectives of the installed backends)"
            )
        if self.init_method != "env":
            # TorchConfig's field: every group here is made from the rank
            # variables ray-accel sets (MASTER_ADDR, MASTER_PORT: env://).
            raise InputError(
                f"init_method {self.init_method!r}: AcceleratorTorchConfig sets up the process group with "
                "init_method 'env' only (ray-accel sets MASTER_ADDR and MASTER_PORT for each worker)"
            )
        self.hooks = tuple(self.hooks)
        # Every fit() with this config is a job in `ray-accel jobs`: Ray Train
        # builds the controller callback that records it from the driver's
        # environment at fit() time.
        from ray_accel.train.jobs import register_callback

        register_callback()

    @property
    def backend_cls(self) -> Any:
        from ray_accel.train.backend import AcceleratorBackend

        return AcceleratorBackend

    @property
    def train_func_context(self) -> Any:
        from ray_accel.train.worker import WorkerTrainContext

        return WorkerTrainContext
