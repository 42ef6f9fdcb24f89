"""`ray-accel start`: one raylet per partition on this host.

Each raylet is an ordinary `ray start`, run through `ray_accel.cluster.raylet_launch`
so the bridge is installed where detection happens, with its mask in the
environment (a comma list: the only form Ray parses), its resources, its own
block of ports, and the partition labels. Everything that can be checked is
checked before the first raylet starts; if one fails, those already started are
stopped, so a failed start leaves nothing behind.
"""

from __future__ import annotations

import concurrent.futures
import os
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from ray_accel.bridge.managers import BridgeSpec, BridgeUnsupported, check_ray_version, raylet_env
from ray_accel.cluster import auth, procs, state
from ray_accel.cluster.gcs import Progress, wait_registered
from ray_accel.cluster.ports import check_free, plan_ports
from ray_accel.cluster.raylet import (
    DEFAULT_GCS_PORT,
    StartRequest,
    all_pids,
    launch,
    partition_env,
    ray_start_args,
    raylet_base_env,
    validate_ray_args,
)
from ray_accel.core.errors import InputError, RayAccelError
from ray_accel.partition.plan import Partition, plan_partitions
from ray_accel.plugins.inventory import discover


def running_record() -> dict[str, Any] | None:
    """The recorded node if any of its processes is still alive."""
    record = state.load()
    if record is None:
        return None
    if any(r.alive() for r in all_pids(record["partitions"])):
        return record
    return None


def start(req: StartRequest, progress: Progress) -> dict[str, Any]:
    if req.head == bool(req.address):
        raise InputError("give exactly one of --head (start a cluster) or --address ADDR (join one)")
    validate_ray_args(req.ray_args)
    running = running_record()
    if running is not None:
        raise InputError(
            f"ray-accel partitions are already running on this node ({state.state_dir() / state.STATE_FILE}); "
            "run `ray-accel stop` first, or `ray-accel start --recover`"
        )
    plugin = discover(req.backend).require_primary()
    plan = plan_partitions(plugin.list_devices(), req.mode, req.partitions, req.manual)
    req.partitions = len(plan)
    spec = BridgeSpec.from_plugin(plugin)
    gcs_port = req.port or DEFAULT_GCS_PORT
    if req.head:
        check_free([gcs_port], "--port")
    ports = plan_ports(len(plan), req.port_base)
    if req.head and any(gcs_port in p.all() for p in ports):
        raise InputError(f"--port {gcs_port} falls inside the partitions' port blocks; choose another --port-base")
    # Last of the checks, so refused input never leaves a new token behind. A
    # head makes a token if there is none; a joining raylet must be given one.
    cluster_auth = auth.resolve(os.environ, state.state_dir(), create=req.head)
    if cluster_auth.warning:
        progress(f"warning: {cluster_auth.warning}")
    base_env = raylet_base_env(cluster_auth)
    state.clear()  # a record whose processes are all gone is stale
    try:
        check_ray_version()
        base_env.update(raylet_env([spec], base_env))
    except BridgeUnsupported as e:
        progress(f"warning: {e}")

    log_dir = state.state_dir()
    record: dict[str, Any] = {
        "version": state.VERSION,
        "created": time.time(),
        "head": req.head,
        "mode": plan.mode.value,
        "spec": asdict(spec),
        "ray_args": req.ray_args,
        "gcs_address": req.address,
        "port_base": ports[0].base,
        "gcs_port": gcs_port if req.head else None,
        "auth": cluster_auth.to_json(),
        "partitions": [],
    }

    def start_one(i: int, part: Partition, gcs: str | None) -> dict[str, Any]:
        env = partition_env(base_env, spec, part)
        args = ray_start_args(part, ports[i], spec, req.head and i == 0, gcs, req, gcs_port)
        progress(f"starting {part.name}: {spec.visible_ids_env}={part.visible_ids}")
        result = launch(part.name, args, env, log_dir, req.timeout_s)
        entry = dict(part.to_json(), head=req.head and i == 0, ports=asdict(ports[i]), **result)
        return entry

    started: list[dict[str, Any]] = []
    try:
        first = 0
        if req.head:
            head = start_one(0, plan[0], None)
            started.append(head)
            if not head.get("ok"):
                raise RayAccelError(f"head partition {plan[0].name} failed: {head['error']}")
            record["gcs_address"] = head["gcs_address"]
            first = 1
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(plan) - first)) as pool:
            futures = [pool.submit(start_one, i, plan[i], record["gcs_address"]) for i in range(first, len(plan))]
            for fut in futures:
                started.append(fut.result())
        failed = [p for p in started if not p.get("ok")]
        if failed:
            raise RayAccelError(f"partition {failed[0]['partition']} failed: {failed[0]['error']}")
        record["partitions"] = started
        state.save(record)
        wait_registered(record["gcs_address"], [p["node_id"] for p in started], req.timeout_s, progress, cluster_auth)
    except BaseException:
        procs.terminate(all_pids(started))
        state.clear()
        raise
    if req.metrics:
        deploy_metrics(record, started, progress)
    return record


def deploy_metrics(record: dict[str, Any], parts: Sequence[dict[str, Any]], progress: Progress) -> None:
    """Metrics are secondary: a failure here is reported, not fatal."""
    from ray_accel.metrics import export as exporter

    try:
        first = record["partitions"][0]["partition"] if record["partitions"] else None
        names = exporter.deploy(record["gcs_address"], parts, node_level_partition=first)
        progress(f"metrics exporters: {', '.join(names)}")
        record["metrics"] = True
    except Exception as e:
        progress(f"warning: metrics exporters not started: {type(e).__name__}: {e}")
        record["metrics"] = False
    state.save(record)
