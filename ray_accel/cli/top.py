"""`ray-accel top`: every host's partitions, devices, workloads, orphans and jobs, live.

Partitions come from the GCS (every raylet carrying the partition label, on
any host), readings from each raylet's metrics exporter. The cluster is the
one this host's record names; `top` never starts one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from ray_accel.cli import render
from ray_accel.cli.connect import connect_to_recorded_cluster, leave_cluster
from ray_accel.cli.jobs import jobs_text, top_jobs
from ray_accel.cli.output import emit, json_option
from ray_accel.cli.params import seconds
from ray_accel.core.reader import dump_fields, load
from ray_accel.jobs.model import job_json
from ray_accel.jobs.store import HEAD_RESOURCE

if TYPE_CHECKING:
    from ray_accel.cluster.status import ClusterPartition
    from ray_accel.metrics.collect import WorkloadJson
    from ray_accel.rayapi.gcs import GcsNode

# What `top --json` shows of each device of an exporter's snapshot.
DEVICE_FIELDS = (
    "id host partition family accelerator_type utilization memory_used_bytes memory_total_bytes power_watts "
    "temperature_c recent_events reason"
).split()
HEALTH = ("state", "since", "detail", "out")  # what `top --json` shows of a partition's health
# `healthy` in `top --json`: the rule's verdict, None while unknown.
VERDICT = {"healthy": True, "unhealthy": False}


def top_payload(partitions: Sequence[ClusterPartition], snaps: Mapping[str, dict[str, Any] | str]) -> dict[str, Any]:
    """The view of every partition raylet (`status.cluster_view`) and its
    exporter's snapshot or the reason there is none, keyed by node id."""
    from ray_accel.metrics.collect import OrphanReading

    parts: list[dict[str, Any]] = []
    devices: list[dict[str, Any]] = []
    workloads: list[WorkloadJson] = []
    orphans: list[OrphanReading] = []
    errors: list[str] = []
    # A drained or stopped partition has no exporter: its host's host-level one reports it.
    others = {
        (s["host"], name): h for s in snaps.values() if isinstance(s, dict) for name, h in s.get("others", {}).items()
    }
    for p in partitions:
        where = f"{p.host}/{p.partition}"
        snap = snaps.get(p.node_id, "raylet is dead" if not p.alive else "no snapshot")
        # `workloads`: its raylet's Ray workers, Serve replicas named (`metrics.replicas.replica_fields`).
        row = dump_fields(p, device_ids=[], exporter="ok", took_s=None, workloads=[])
        parts.append(row)
        if isinstance(snap, str) or not snap:
            row["exporter"] = snap or "no sample yet"
            if (other := others.get((p.host, p.partition))) is not None:
                row["health"], row["exporter"] = {k: other.get(k) for k in HEALTH}, f"left ({other['state']})"
            elif p.alive:
                errors.append(f"{where}: {row['exporter']}")
            continue
        row["device_ids"] = [d["id"] for d in snap.get("devices", []) if d["partition"] == p.partition]
        row["took_s"] = snap.get("took_s")
        # The partition's state and its devices' health, by the host's decider.
        health = snap.get("health") or {}
        row["health"] = {k: health.get(k) for k in HEALTH} if health else None
        by_rule = {
            d: s for h in (health, *snap.get("others", {}).values()) for d, s in (h.get("devices") or {}).items()
        }
        devices += [
            {**{k: d.get(k) for k in DEVICE_FIELDS}, "healthy": VERDICT.get(rule or ""), "health_state": rule}
            for d in snap.get("devices", [])
            for rule in [by_rule.get(d.get("id"))]
        ]
        # The devices out of service, which no exporter samples: from the host-level one.
        devices += [
            {
                **{k: d.get(k) for k in DEVICE_FIELDS},
                "healthy": VERDICT.get(d.get("health_state") or ""),
                "health_state": d.get("health_state"),
                "out_of_service": True,
                "check": d.get("check"),
                "checking": d.get("checking"),
                "repair": d.get("repair"),
            }
            for d in snap.get("out_of_service", [])
        ]
        mine: list[WorkloadJson] = snap.get("workloads", [])
        row["workloads"] = mine
        workloads += mine
        orphans += [load(OrphanReading, o) for o in snap.get("orphans", [])]
        errors += [f"{where}: {e}" for e in snap.get("errors", [])]
    return {"partitions": parts, "devices": devices, "workloads": workloads, "orphans": orphans, "errors": errors}


def head_of(nodes: Iterable[GcsNode]) -> dict[str, str] | None:
    """The cluster's live head raylet in the GCS's node table, apart from the partitions."""
    found = [n for n in nodes if n.alive and HEAD_RESOURCE in n.total]
    return {"node_id": found[0].node_id, "ip": found[0].ip} if found else None


@click.command()
@click.option("--once", is_flag=True, help="print one view and exit")
@seconds("--interval", 0.1, 3600, 2.0, "seconds between refreshes")
@json_option
def top(once: bool, interval: float, as_json: bool) -> int:
    """Live view of every host's partitions, devices, workloads and orphans."""
    from ray_accel.cluster.status import cluster_view
    from ray_accel.metrics import snapshots

    try:
        while True:
            record, nodes = connect_to_recorded_cluster()  # connects once: a driver stays connected
            parts = cluster_view(record.gcs_address, nodes).partitions  # every host's partition raylets
            payload = top_payload(parts, snapshots.snapshots([p.node_id for p in parts if p.alive]))
            payload["head"] = head_of(nodes.values())
            listed, waiting = top_jobs(record)
            payload["jobs"] = [job_json(j, waiting=waiting) for j in listed]
            if not as_json and not once:
                print("\033[2J\033[H", end="")
            # emit calls the text view at once, inside this iteration.
            emit(as_json, payload, lambda p: f"{render.top_text(p)}\n\n{jobs_text(listed, waiting)}")  # noqa: B023
            if once:
                return 0
            time.sleep(interval)
    finally:
        leave_cluster()
