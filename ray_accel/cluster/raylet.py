"""One partition's raylet: the start request and its environment (its `ray
start` arguments: `ray_accel.cluster.startargs`; the subprocess that runs it:
`ray_accel.cluster.launcher`; the user's keys it refuses:
`ray_accel.partition.labels.check_user_keys`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ray_accel.bridge.managers import SPEC_ENV, BridgeSpec
from ray_accel.cluster.host import Share
from ray_accel.cluster.raylet_launch import CPU_SET_ENV, PARTITION_ENV
from ray_accel.cluster.startargs import RayOptions
from ray_accel.core.health_state import HealthSettings
from ray_accel.core.numa import format_cpulist
from ray_accel.partition.plan import Partition

DEFAULT_GCS_PORT = 6379


@dataclass(frozen=True)
class Join:
    """Where this host's raylets go: a new cluster, its GCS on `port`
    (`head`), or the one whose GCS is at `address`; their port blocks from
    `port_base` (None: the first free)."""

    head: bool = False
    address: str | None = None
    port: int | None = None
    port_base: int | None = None


@dataclass(frozen=True)
class Split:
    """How to split the host (`plan` and `start`): `--manual SPEC` alone
    means manual mode; with another `--mode` it is refused, naming both."""

    mode: str = "auto-split"
    partitions: int | None = None
    manual: str | None = None
    backend: str | None = None

    @classmethod
    def given(cls, mode: str | None, partitions: int | None, manual: str | None, backend: str | None) -> Split:
        return cls(mode or ("manual" if manual is not None else "auto-split"), partitions, manual, backend)


@dataclass(frozen=True)
class Offer:
    """What every partition offers beside its devices: the user's labels, the
    host's custom resources (divided like CPUs), and the workers its raylet
    may run (None: sized by its share)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[str, float] = field(default_factory=dict)
    max_workers: int | None = None


@dataclass(frozen=True)
class Services:
    """ray-accel's metrics exporters and Ray's dashboard: on unless turned off."""

    metrics: bool = True
    dashboard: bool = True


@dataclass(frozen=True)
class StartRequest:
    """What `ray-accel start` is asked for (the CLI's options, checked)."""

    join: Join = field(default_factory=Join)
    split: Split = field(default_factory=Split)
    offer: Offer = field(default_factory=Offer)
    services: Services = field(default_factory=Services)
    ray: RayOptions = field(default_factory=RayOptions)  # the user's `ray start` options (after `--`)
    health: HealthSettings = field(default_factory=HealthSettings)  # the host's health settings
    timeout_s: float = 180.0


def partition_env(
    base_env: dict[str, str], spec: BridgeSpec, part: Partition, share: Share | None = None
) -> dict[str, str]:
    """A partition raylet's environment: its mask (a comma list), its name, what
    every process using its devices needs (bridge or not), where the bridge is
    on its own spec (the type of its own devices), and the CPUs its launcher
    pins it to (when it is pinned)."""
    env = {**base_env, **dict(spec.process_env), spec.visible_ids_env: part.visible_ids, PARTITION_ENV: part.name}
    if SPEC_ENV in base_env:
        env[SPEC_ENV] = spec.to_env()
    env.pop(CPU_SET_ENV, None)
    if share is not None and share.cpu_set is not None:
        env[CPU_SET_ENV] = format_cpulist(share.cpu_set)
    return env
