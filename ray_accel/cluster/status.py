"""`ray-accel status`: this host's partitions, from the record, /proc and the GCS.

Read-only: it takes no lock, creates no directory and starts nothing. A
partition is alive only if its recorded raylet is still that raylet
(`procs.check`); a process the record misnames is reported, never called ours.
"""

from __future__ import annotations

from typing import Any

from ray_accel.cluster import procs, state
from ray_accel.cluster.gcs import gcs_nodes
from ray_accel.cluster.record import NodeRecord, PartitionEntry


def empty_status() -> dict[str, Any]:
    return {
        "running": False,
        "host": state.host_name(),
        "state_file": str(state.state_file()),
        "gcs_address": None,
        "dashboard_address": None,
        "gcs_alive": False,
        "auth": None,
        "env": {},
        "warnings": [],
        "partitions": [],
    }


def status() -> dict[str, Any]:
    record = state.load()
    if record is None:
        return empty_status()
    return describe(record)


def describe(record: NodeRecord) -> dict[str, Any]:
    warnings: list[str] = []
    here = state.host_name()
    if record.host != here:
        warnings.append(
            f"the record was written on host {record.host!r}, this is {here!r}: its processes are not this host's"
        )
        checks: dict[Any, procs.Check] = {}
    else:
        checks = procs.check_record(record)
    for c in checks.values():
        if c.verdict is procs.Verdict.FOREIGN:
            warnings.append(f"state file {state.state_file()} names {c.describe()}; it is not counted as ours")
    if record.stopping:
        warnings.append("a `ray-accel stop` is stopping these partitions")

    def ours(p: PartitionEntry, *kinds: str) -> list[bool]:
        return [checks[r].ours for r in p.of_kind(*kinds) if r in checks]

    gcs_recorded = [ok for p in record.partitions for ok in ours(p, "gcs_server")]
    has_gcs = any(p.of_kind("gcs_server") for p in record.partitions)
    gcs_up = any(gcs_recorded) if has_gcs else True
    nodes = gcs_nodes(record.gcs_address, 3.0, record.auth) if gcs_up else None
    resource = record.spec.resource_name
    out = []
    for p in record.partitions:
        raylet = p.raylet()
        alive = bool(ours(p, "raylet")) and all(ours(p, "raylet"))
        node = (nodes or {}).get(p.node_id or "", {})
        total = node.get("total", {})
        avail = node.get("available", {})
        problems = [checks[r].describe() for r in p.processes if r in checks and not checks[r].ours]
        out.append(
            {
                "partition": p.name,
                "device_ids": list(p.device_ids),
                "core_ids": list(p.core_ids),
                "visible_ids": p.visible_ids,
                "accelerator_type": p.accelerator_type,
                "models": list(p.models),
                "pid": raylet.pid if raylet else None,
                "node_id": p.node_id,
                "head": p.head,
                "alive": alive,
                "registered": node.get("alive") if nodes is not None else None,
                "in_use": {k: total[k] - avail.get(k, 0.0) for k in (resource, "CPU") if k in total},
                "total": {k: total[k] for k in (resource, "CPU") if k in total},
                "worker_ports": [p.ports.min_worker_port, p.ports.max_worker_port],
                "problems": problems,
                "share": None if p.share is None else p.share.to_json(),
                "cpu_set": None if p.share is None or p.share.cpu_set is None else list(p.share.cpu_set),
                "log": p.log,
            }
        )
    return {
        "running": any(p["alive"] for p in out),
        "host": record.host,
        "state_file": str(state.state_file()),
        "gcs_address": record.gcs_address,
        "gcs_alive": gcs_up,
        # The head's dashboard (state API, jobs): `ray job submit --address <this>`.
        "dashboard_address": record.dashboard_url,
        "cpu_pinning": record.cpu_pinning,
        "inherited_mask": None if record.inherited_mask is None else dict(record.inherited_mask),
        "auth": record.auth.to_json(),
        # Exactly what a driver needs in its environment (a path, never the token).
        "env": record.auth.env(),
        "warnings": warnings,
        "partitions": out,
    }
