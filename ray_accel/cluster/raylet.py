"""One partition's raylet: its `ray start` arguments and environment, and the
subprocess that starts it (`ray_accel.cluster.raylet_launch`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from ray_accel.bridge.managers import SPEC_ENV, BridgeSpec
from ray_accel.cluster import auth
from ray_accel.cluster.ports import RayletPorts
from ray_accel.cluster.procs import partition_records
from ray_accel.cluster.raylet_launch import PARTITION_ENV
from ray_accel.core.errors import InputError
from ray_accel.core.processes import ProcessRecord
from ray_accel.partition.labels import PARTITION_LABEL, TYPE_LABEL
from ray_accel.partition.plan import Partition

DEFAULT_GCS_PORT = 6379


# Flags ray-accel sets per partition; a user value would break the split.
RESERVED_FLAGS = {
    "--head", "--address", "--port", "--resources", "--num-gpus", "--labels", "--node-manager-port",
    "--object-manager-port", "--min-worker-port", "--max-worker-port", "--worker-port-list",
    "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
    "--metrics-export-port", "--ray-client-server-port", "--dashboard-port", "--block",
}  # fmt: skip


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


def flag_names(args: Sequence[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in args if a.startswith("--")]


def has_flag(args: Sequence[str], name: str) -> bool:
    return name in flag_names(args)


def validate_ray_args(args: Sequence[str]) -> None:
    clash = [f for f in flag_names(args) if f.replace("_", "-") in RESERVED_FLAGS]
    if clash:
        raise InputError(f"{clash[0]} is set per partition by ray-accel; remove it")


def ray_start_args(
    part: Partition,
    ports: RayletPorts,
    spec: BridgeSpec,
    head: bool,
    gcs: str | None,
    req: StartRequest,
    gcs_port: int,
    extra_labels: Mapping[str, str] | None = None,
) -> list[str]:
    args = ["start"]
    args += ["--head", "--port", str(gcs_port)] if head else ["--address", str(gcs)]
    args += ports.ray_start_args(head)
    count = len(part.core_ids)
    if spec.resource_name == "GPU":
        args += ["--num-gpus", str(count)]
    else:
        args += ["--resources", json.dumps({spec.resource_name: count})]
    labels = {**(extra_labels or {}), PARTITION_LABEL: part.name}
    if spec.accelerator_type:
        labels[TYPE_LABEL] = spec.accelerator_type.replace(" ", "-")
    args += ["--labels", ",".join(f"{k}={v}" for k, v in labels.items())]
    count = req.partitions or 1
    if not has_flag(req.ray_args, "--num-cpus"):
        # Every raylet would otherwise claim every CPU of the host.
        args += ["--num-cpus", str(max(1, (os.cpu_count() or 1) // max(1, count)))]
    if not has_flag(req.ray_args, "--object-store-memory"):
        share = int(psutil.virtual_memory().total * 0.3 / max(1, count))
        args += ["--object-store-memory", str(max(100 * 1024**2, min(share, 2 * 1024**3)))]
    if head and not has_flag(req.ray_args, "--include-dashboard"):
        args += ["--include-dashboard", "false"]
    if not has_flag(req.ray_args, "--disable-usage-stats"):
        args.append("--disable-usage-stats")
    return args + (list(req.ray_args) if head else without(req.ray_args, HEAD_ONLY_FLAGS))


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


def partition_env(base_env: dict[str, str], spec: BridgeSpec, part: Partition) -> dict[str, str]:
    """A partition raylet's environment: its mask (a comma list), its name, what
    every process using its devices needs (bridge or not) and, where the bridge
    is on, its own spec (the type of its own devices)."""
    env = {**base_env, **dict(spec.process_env), spec.visible_ids_env: part.visible_ids, PARTITION_ENV: part.name}
    if SPEC_ENV in base_env:
        env[SPEC_ENV] = spec.to_env()
    return env


def launch(name: str, args: list[str], env: dict[str, str], log_dir: Path, timeout_s: float) -> dict[str, Any]:
    result_path = log_dir / f"{name}.result.json"
    result_path.unlink(missing_ok=True)
    log_path = log_dir / f"{name}.log"
    cmd = [sys.executable, "-m", "ray_accel.cluster.raylet_launch", str(result_path), "--", *args]
    with open(log_path, "w") as log:
        try:
            subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            pass
    try:
        result: dict[str, Any] = json.loads(result_path.read_text())
    except (OSError, ValueError):
        result = {"ok": False, "error": f"no result within {timeout_s:g}s"}
    result["log"] = str(log_path)
    if not result.get("ok"):
        tail = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()][-3:]
        result["error"] = f"{result.get('error')}; log {log_path}: " + " | ".join(tail)
    return result


def all_pids(parts: Sequence[dict[str, Any]]) -> list[ProcessRecord]:
    return [r for p in parts for r in partition_records(p)]
