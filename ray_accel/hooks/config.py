"""Lifecycle hooks around a workload, and the config a hook may return.

A hook is stateless: what it needs after a restart it reads back from the
`Workload`. `pre_create` may refuse (`WorkloadDenied`) or ask to be retried
later (`WorkloadRetry`); whatever it returns is validated before use, so a
hook cannot inject newlines into an environment or override the mask (the
variables no hook may set are checked where the hooks run, against every
installed backend's declaration).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ray_accel.core.errors import InputError, RayAccelError
from ray_accel.plugins.runtime import RANK_ENV_VARS

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

RESOURCE_FILE_ENV = "RAYACCEL_RESOURCE_FILE"

# ray-accel's own variables that define what a workload may touch or how it
# reaches Ray, and torchrun's rank variables; a hook that sets one would break
# the partition or the job, so it is refused. Each backend protects its own
# (its visibility and collective variables: `DevicePlugin.protected_env`),
# checked when the hooks run (`ray_accel.hooks.run`).
PROTECTED_ENV_VARS = frozenset({RESOURCE_FILE_ENV, "RAY_ADDRESS", "LD_PRELOAD"}) | RANK_ENV_VARS


# Fields a container runtime applies when it creates a process: a mount
# namespace, networks, supplementary groups, a seccomp filter. A Ray worker is
# a process the raylet started before its hooks run, and ray-accel does not
# re-create it, so none of them can be applied: a value is refused (naming the
# field, and by HookRun the hook), never dropped.
NOT_APPLICABLE = ("mounts", "networks", "extra_gids", "extra_syscalls")


class WorkloadDenied(RayAccelError):
    """The hook refuses this workload; it is not retried."""


class WorkloadRetry(RayAccelError):
    """The hook cannot admit the workload now; the caller may try again."""


class HookConfigError(InputError):
    """A hook returned a config that is not allowed."""


@dataclass(frozen=True)
class Workload:
    workload_id: str
    partition: str
    visible_ids: tuple[int, ...] = ()
    pid: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class WorkloadConfig:
    """What a hook's `pre_create` gives its workload: environment variables
    (set in the worker) and resource data (a file named by
    `RAYACCEL_RESOURCE_FILE`). The `NOT_APPLICABLE` fields exist to be
    refused by name: empty is the only value they take."""

    mounts: tuple[tuple[str, str], ...] = ()
    env_vars: Mapping[str, str] = field(default_factory=dict, hash=False)
    resource_data: Mapping[str, str] = field(default_factory=dict, hash=False)
    networks: tuple[str, ...] = ()
    extra_gids: tuple[int, ...] = ()
    extra_syscalls: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name, value in self.env_vars.items():
            if not _ENV_NAME.match(name):
                raise HookConfigError(f"bad environment variable name {name!r}")
            if name in PROTECTED_ENV_VARS:
                raise HookConfigError(f"hook may not set protected variable {name}")
            if not isinstance(value, str) or "\n" in value or "\0" in value:
                raise HookConfigError(f"bad value for {name}: must be one line of text")
        for key, value in self.resource_data.items():
            if not _ENV_NAME.match(key) or "\n" in str(value):
                raise HookConfigError(f"bad resource_data entry {key!r}")
        for name in NOT_APPLICABLE:
            if value := getattr(self, name):
                raise HookConfigError(
                    f"{name}={value!r} cannot be applied to a Ray worker: it is a process the raylet "
                    "started before its hooks ran, not a container ray-accel creates (leave it empty)"
                )


class LifecycleHook:
    """Default hook: admits everything and does nothing."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload

    def pre_create(self) -> WorkloadConfig:
        return WorkloadConfig()

    def post_create(self) -> None:
        """Runs once every hook's pre_create has, before the workload's own code."""

    def pre_terminate(self) -> None:
        """Runs when the workload ends, before post_terminate (bounded: a
        hook stuck on a device is given up on)."""

    def post_terminate(self) -> None:
        """Runs after the workload, exactly once per pre_create: also after a
        denial or a retry request, and (by the ledger) for a process that died."""
