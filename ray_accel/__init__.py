"""ray-accel: accelerator discovery, partitioning and training for Ray.

The public names live here; importing the package stays light (no Ray, no
torch) so the CLI starts fast, and names that need Ray load on first use.
"""

from __future__ import annotations

from typing import Any

from ray_accel.core.errors import InputError, RayAccelError
from ray_accel.hooks.config import LifecycleHook, Workload, WorkloadConfig, WorkloadDenied, WorkloadRetry

__version__ = "0.3.0"

__all__ = [
    "InputError",
    "LifecycleHook",
    "RayAccelError",
    "Workload",
    "WorkloadConfig",
    "WorkloadDenied",
    "WorkloadRetry",
    "__version__",
    "init",
    "with_hooks",
]


def __getattr__(name: str) -> Any:
    if name == "init":
        from ray_accel.cluster.driver import init

        return init
    if name == "with_hooks":
        from ray_accel.hooks.tasks import with_hooks

        return with_hooks
    raise AttributeError(f"module 'ray_accel' has no attribute {name!r}")
