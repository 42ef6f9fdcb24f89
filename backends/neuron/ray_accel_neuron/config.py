"""The backend's configuration: what the user set in the environment.

This is input (a bad value is an `InputError` naming the variable: exit 2),
unlike what the driver and tools report. Seams for tests are paths:
`RAYACCEL_SYS_ROOT` (the root of /sys: PCI, DMI), `RAYACCEL_NEURON_SYSFS_ROOT`
(the Neuron class directory; when it ends in devices/virtual/neuron_device,
the /sys root is taken from it), `RAYACCEL_NEURON_DEV_ROOT` (/dev).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ray_accel.core import files, health_track
from ray_accel.core.errors import InputError
from ray_accel.core.validate import ascii_int, finite_float
from ray_accel_neuron import limits, sysfs
from ray_accel_neuron.cores import LNC_ENV
from ray_accel_neuron.neuron_ls import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, PATH_ENV, TIMEOUT_ENV

SYS_ROOT_ENV = "RAYACCEL_SYS_ROOT"
SYSFS_ENV = "RAYACCEL_NEURON_SYSFS_ROOT"
DEV_ROOT_ENV = "RAYACCEL_NEURON_DEV_ROOT"
MONITOR_ENV = "RAYACCEL_NEURON_MONITOR"  # a path, or "off"
MONITOR_PERIOD_ENV = "RAYACCEL_NEURON_MONITOR_PERIOD_S"
LNC_FILE_ENV = "RAYACCEL_NEURON_LNC_FILE"
# EKS nodes may carry NEURON_LOGICAL_NC_CONFIG=<n> here (Neuron docs, deploy/eks/prerequisites.rst).
DEFAULT_LNC_FILE = "/opt/aws/neuron/logical_nc_config"
DEFAULT_MONITOR_PERIOD_S = 5  # neuron-monitor's own default period


@dataclass(frozen=True, kw_only=True)
class Config:
    sys_root: str
    neuron_root: str
    dev_root: str
    neuron_ls: str | None  # the user's path; None: search
    ls_timeout_s: float
    monitor: str | None  # the user's path; None: search
    monitor_off: bool
    monitor_period_s: int
    env_lnc: int | None
    lnc_file: str
    environ: Mapping[str, str]
    recovery_polls: int = health_track.DEFAULT_RECOVERY_POLLS  # K clean polls that end a health fault


def _sys_roots(env: Mapping[str, str]) -> tuple[str, str]:
    neuron = env.get(SYSFS_ENV)
    sys_root = env.get(SYS_ROOT_ENV)
    if sys_root is None and neuron:
        parent = os.path.normpath(neuron)
        suffix = os.sep + sysfs.NEURON_CLASS_DIR
        sys_root = parent[: -len(suffix)] if parent.endswith(suffix) else None
    sys_root = sys_root or sysfs.DEFAULT_SYS_ROOT
    return sys_root, neuron or os.path.join(sys_root, sysfs.NEURON_CLASS_DIR)


def lnc_value(text: str, what: str) -> int:
    value = ascii_int(text, what, 1, 2)
    if value not in limits.LNC_VALUES:
        raise InputError(f"{what}: {text!r} must be 1 or 2")
    return value


def from_environ(env: Mapping[str, str]) -> Config:
    sys_root, neuron_root = _sys_roots(env)
    timeout = DEFAULT_TIMEOUT_S
    if env.get(TIMEOUT_ENV) is not None:
        timeout = finite_float(env[TIMEOUT_ENV], TIMEOUT_ENV, 0.001, MAX_TIMEOUT_S)
    monitor = env.get(MONITOR_ENV) or None
    period = DEFAULT_MONITOR_PERIOD_S
    if env.get(MONITOR_PERIOD_ENV) is not None:
        period = ascii_int(env[MONITOR_PERIOD_ENV], MONITOR_PERIOD_ENV, 1, 3600)
    env_lnc = None
    if env.get(LNC_ENV) is not None:
        env_lnc = lnc_value(env[LNC_ENV], LNC_ENV)
    return Config(
        sys_root=sys_root,
        neuron_root=neuron_root,
        dev_root=env.get(DEV_ROOT_ENV) or "/dev",
        neuron_ls=env.get(PATH_ENV) or None,
        ls_timeout_s=timeout,
        monitor=None if monitor == "off" else monitor,
        monitor_off=monitor == "off",
        monitor_period_s=period,
        env_lnc=env_lnc,
        lnc_file=env.get(LNC_FILE_ENV) or DEFAULT_LNC_FILE,
        environ=env,
        recovery_polls=health_track.recovery_polls(env),
    )


def read_lnc_file(path: str) -> tuple[int | None, str | None]:
    """(value, problem). The file holds `NEURON_LOGICAL_NC_CONFIG=<n>`; an
    absent file is normal. It is the host's configuration, not the user's
    input, so a bad one is reported as a problem, not raised."""
    try:
        text = files.read_text(path, 4096)
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, f"{path}: {files.describe(e)}"
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() == LNC_ENV:
            if value.strip() in ("1", "2"):
                return int(value.strip()), None
            return None, f"{path}: {LNC_ENV}={value.strip()!r} is not 1 or 2"
    return None, f"{path} does not set {LNC_ENV}"
