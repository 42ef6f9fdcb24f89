"""ray-accel: accelerator discovery, partitioning and training for Ray.

The public names live here; importing the package stays light (no Ray, no
torch, no plugin or cluster module) so the CLI starts fast: every name but the
errors and the version loads on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ray_accel.core.errors import InputError, RayAccelError

if TYPE_CHECKING:
    from ray_accel.cluster.driver import init
    from ray_accel.hooks.config import LifecycleHook, Workload, WorkloadConfig, WorkloadDenied, WorkloadRetry
    from ray_accel.hooks.tasks import with_hooks

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


# Public name -> the module that defines it, imported on first use.
LAZY = {
    "LifecycleHook": "ray_accel.hooks.config",
    "Workload": "ray_accel.hooks.config",
    "WorkloadConfig": "ray_accel.hooks.config",
    "WorkloadDenied": "ray_accel.hooks.config",
    "WorkloadRetry": "ray_accel.hooks.config",
    "init": "ray_accel.cluster.driver",
    "with_hooks": "ray_accel.hooks.tasks",
}


def __getattr__(name: str) -> Any:
    if name not in LAZY:
        raise AttributeError(f"module 'ray_accel' has no attribute {name!r}")
    return getattr(importlib.import_module(LAZY[name]), name)
