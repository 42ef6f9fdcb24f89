"""One partition's raylet: its `ray start` arguments and environment (the
subprocess that runs it: `ray_accel.cluster.launcher`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ray_accel.bridge.managers import SPEC_ENV, BridgeSpec
from ray_accel.cluster import auth
from ray_accel.cluster.host import HOST_FLAGS
from ray_accel.cluster.ports import RayletPorts
from ray_accel.cluster.raylet_launch import CPU_SET_ENV, PARTITION_ENV
from ray_accel.core import ray_resources
from ray_accel.core.errors import InputError
from ray_accel.core.numa import format_cpulist
from ray_accel.partition.labels import PARTITION_LABEL, TYPE_LABEL
from ray_accel.partition.plan import Partition
from ray_accel.partition.share import Share

DEFAULT_GCS_PORT = 6379


# Flags ray-accel sets per partition; a user value would break the split.
RESERVED_FLAGS = {
    "--head", "--address", "--port", "--resources", "--num-gpus", "--labels", "--labels-file",
    "--node-manager-port", "--object-manager-port", "--min-worker-port", "--max-worker-port", "--worker-port-list",
    "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
    "--metrics-export-port", "--ray-client-server-port", "--dashboard-port", "--block",
}  # fmt: skip
# Reserved flags that have an option of ray-accel's own in their place.
OUR_OPTION = {
    "--labels": "ray-accel start --labels k=v,... (they go to every partition)",
    "--labels-file": "ray-accel start --labels k=v,... (they go to every partition)",
    "--resources": "ray-accel start --resources '{...}' (the host's amounts, divided between partitions)",
    "--port": "ray-accel start --port",
    "--address": "ray-accel start --address",
    "--head": "ray-accel start --head",
}


# Ray refuses these on a raylet that joins a cluster.
HEAD_ONLY_FLAGS = {"--include-dashboard", "--redis-shard-ports"}


@dataclass
class StartRequest:
    head: bool = False
    address: str | None = None
    mode: str = "auto-split"
    partitions: int | None = None
    manual: str | None = None
    port: int | None = None
    port_base: int | None = None
    ray_args: list[str] = field(default_factory=list)
    backend: str | None = None
    timeout_s: float = 180.0
    metrics: bool = True
    dashboard: bool = True
    labels: dict[str, str] = field(default_factory=dict)  # the user's, on every partition
    resources: dict[str, float] = field(default_factory=dict)  # the user's, host totals


def flag_names(args: Sequence[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in args if a.startswith("--")]


def has_flag(args: Sequence[str], name: str) -> bool:
    return name in flag_names(args)


def validate_ray_args(args: Sequence[str]) -> None:
    clash = [f for f in flag_names(args) if f.replace("_", "-") in RESERVED_FLAGS]
    if clash:
        flag = clash[0].replace("_", "-")
        hint = f"use `{OUR_OPTION[flag]}`" if flag in OUR_OPTION else "remove it"
        raise InputError(f"{clash[0]} is set per partition by ray-accel; {hint}")


OUR_LABEL_PREFIX = PARTITION_LABEL.split("/", 1)[0] + "/"
# Ray's own resources: set by their own flags (--num-cpus ...), never in --resources.
RAY_RESOURCE_FLAGS = {
    "CPU": "-- --num-cpus",
    ray_resources.RAY_GPU: "(set per partition)",
    "memory": "-- --memory",
    "object_store_memory": "-- --object-store-memory",
}


def check_user_keys(labels: Mapping[str, str], resources: Mapping[str, float], spec: BridgeSpec) -> None:
    """Refuse a user label or resource that ray-accel sets itself, naming it."""
    for key in labels:
        if key.startswith(OUR_LABEL_PREFIX):
            raise InputError(
                f"--labels: {key!r} is ray-accel's own label key ({OUR_LABEL_PREFIX}...: partition, type and host "
                "labels are set per partition); choose another key"
            )
    for name in resources:
        if name == spec.resource_name:
            raise InputError(
                f"--resources: {name!r} is the accelerator resource ray-accel sets per partition from its devices"
            )
        if name in RAY_RESOURCE_FLAGS:
            raise InputError(
                f"--resources: {name!r} is Ray's own resource; give the host's figure with {RAY_RESOURCE_FLAGS[name]}"
            )
        if name.startswith(("accelerator_type:", "node:")):
            raise InputError(f"--resources: {name!r} is a resource Ray sets itself ({name.split(':')[0]}:...)")


def ray_start_args(
    part: Partition,
    ports: RayletPorts,
    spec: BridgeSpec,
    head: bool,
    gcs: str | None,
    req: StartRequest,
    gcs_port: int,
    share: Share,
    extra_labels: Mapping[str, str] | None = None,
) -> list[str]:
    """`ray start` arguments for one partition: its ports, its accelerator
    count, its share of the host (`share`), its labels, then the user's own
    `ray start` options less the host figures `share` replaces. `extra_labels`
    are ray-accel's own per-partition labels (host, topology)."""
    args = ["start"]
    args += ["--head", "--port", str(gcs_port)] if head else ["--address", str(gcs)]
    args += ports.ray_start_args(head)
    args += ray_resources.start_args(spec.resource_name, len(part.core_ids), share.resources)
    labels = {**req.labels, **(extra_labels or {}), PARTITION_LABEL: part.name}
    if spec.accelerator_type:
        labels[TYPE_LABEL] = spec.accelerator_type.replace(" ", "-")
    args += ["--labels", ",".join(f"{k}={v}" for k, v in labels.items())]
    # Every raylet would otherwise claim the whole host (docs/design.md).
    args += ["--num-cpus", str(share.cpus), "--memory", str(share.memory)]
    args += ["--object-store-memory", str(share.object_store_memory)]
    if head and not req.dashboard and not has_flag(req.ray_args, "--include-dashboard"):
        args += ["--include-dashboard", "false"]
    if not has_flag(req.ray_args, "--disable-usage-stats"):
        args.append("--disable-usage-stats")
    user = without(req.ray_args, set(HOST_FLAGS))
    return args + (user if head else without(user, HEAD_ONLY_FLAGS))


def without(args: Sequence[str], flags: set[str]) -> list[str]:
    """`args` less `flags` and their values (`--f v` or `--f=v`)."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in flags:
            skip = "=" not in a
            continue
        out.append(a)
    return out


def raylet_base_env(cluster_auth: auth.Auth) -> dict[str, str]:
    """This process's environment with the cluster's auth, and the same auth
    applied here so our own GCS client and driver can reach the cluster."""
    auth.apply(cluster_auth)
    env = dict(os.environ)
    if cluster_auth.token_path is not None:
        env.pop(auth.TOKEN_ENV, None)  # raylets read the file, never an env value
    env.update(cluster_auth.env())
    return env


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
