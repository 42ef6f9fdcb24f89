"""`ray-accel status`: this host's partitions, from the record, /proc and the GCS."""

from __future__ import annotations

from typing import Any

from ray_accel.cluster import auth, procs, state
from ray_accel.cluster.gcs import gcs_nodes
from ray_accel.core.processes import ProcessRecord


def record_auth(record: dict[str, Any]) -> auth.Auth:
    return auth.Auth.from_json(record.get("auth") or {})


def raylet_record(p: dict[str, Any]) -> ProcessRecord | None:
    rs = procs.partition_records(p, kinds=("raylet",))
    return rs[0] if rs else None


def gcs_records(record: dict[str, Any]) -> list[ProcessRecord]:
    return [r for p in record["partitions"] for r in procs.partition_records(p, kinds=("gcs_server",))]


def status() -> dict[str, Any]:
    record = state.load()
    if record is None:
        return {"running": False, "gcs_address": None, "gcs_alive": False, "auth": None, "env": {}, "partitions": []}
    address = record.get("gcs_address")
    gcs_pids = gcs_records(record)
    gcs_up = any(r.alive() for r in gcs_pids) if gcs_pids else True
    cluster_auth = record_auth(record)
    nodes = gcs_nodes(address, 3.0, cluster_auth) if address and gcs_up else None
    resource = record["spec"]["resource_name"]
    out = []
    for p in record["partitions"]:
        raylet = raylet_record(p)
        raylet_alive = raylet is not None and raylet.alive()
        node = (nodes or {}).get(p.get("node_id", ""), {})
        total = node.get("total", {})
        avail = node.get("available", {})
        out.append(
            {
                "partition": p["partition"],
                "device_ids": p["device_ids"],
                "core_ids": p["core_ids"],
                "visible_ids": p["visible_ids"],
                "accelerator_type": p.get("accelerator_type", record["spec"].get("accelerator_type")),
                "models": p.get("models", []),
                "pid": raylet.pid if raylet else None,
                "node_id": p.get("node_id"),
                "head": p.get("head", False),
                "alive": raylet_alive,
                "registered": node.get("alive") if nodes is not None else None,
                "in_use": {k: total[k] - avail.get(k, 0.0) for k in (resource, "CPU") if k in total},
                "total": {k: total[k] for k in (resource, "CPU") if k in total},
                "log": p.get("log"),
            }
        )
    return {
        "running": any(p["alive"] for p in out),
        "gcs_address": address,
        "gcs_alive": gcs_up,
        "auth": cluster_auth.to_json(),
        # Exactly what a driver needs in its environment (a path, never the token).
        "env": cluster_auth.env(),
        "partitions": out,
    }
