"""Connecting as a driver to the cluster this host's record names (`top`,
`jobs`, `status`), and what this host's exporters say once connected."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ray_accel.core.errors import RayAccelError


def connect_to_recorded_cluster(status: Mapping[str, Any]) -> None:
    """Connect as a driver to the cluster this host's status records; "no
    cluster" when there is none (never `ray.init()` without an address,
    which would start one)."""
    from ray_accel.cluster import auth
    from ray_accel.metrics import export
    from ray_accel.rayapi.driver import pushed_messages_to_stderr

    if not status["partitions"] or not status["gcs_address"]:
        raise RayAccelError("no cluster: no ray-accel partitions recorded on this host (see `ray-accel start`)")
    if not status["gcs_alive"]:
        raise RayAccelError(f"no cluster: the GCS at {status['gcs_address']} recorded on this host is not running")
    auth.apply(auth.Auth.from_json(status["auth"]))
    # This command's stdout is its result: what Ray pushes to drivers goes to stderr.
    pushed_messages_to_stderr()
    export.connect(status["gcs_address"])


def host_orphans(status: Mapping[str, Any]) -> dict[str, Any]:
    """`{"orphans": [...], "orphan_errors": [...]}` for this host's live
    partitions, from their exporters (the caller is connected)."""
    from ray_accel.metrics import export

    live = {p["node_id"]: p["partition"] for p in status["partitions"] if p.get("alive") and p.get("node_id")}
    orphans: list[dict[str, Any]] = []
    errors: list[str] = []
    for node_id, snap in export.snapshots(live, timeout_s=5.0).items():
        if isinstance(snap, str) or not snap:
            errors.append(f"{live[node_id]}: {snap or 'no sample yet'}")
        else:
            orphans += snap.get("orphans", [])
    return {"orphans": orphans, "orphan_errors": errors}
