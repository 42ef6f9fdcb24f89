"""Connecting as a driver to the cluster this host's record names (`top`,
`jobs`, `status`), and what this host's exporters say once connected."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ray_accel.core.errors import RayAccelError
from ray_accel.core.reader import load

if TYPE_CHECKING:  # the status module is imported only by the commands that show it
    from ray_accel.cluster.status import HostStatus
    from ray_accel.metrics.collect import OrphanReading


def connect_to_recorded_cluster(status: HostStatus) -> None:
    """Connect as a driver to the cluster this host's status records; "no
    cluster" when there is none (never `ray.init()` without an address,
    which would start one)."""
    from ray_accel.cluster import auth
    from ray_accel.metrics import export
    from ray_accel.rayapi.driver import pushed_messages_to_stderr

    if not status.partitions or not status.gcs_address or status.auth is None:
        raise RayAccelError("no cluster: no ray-accel partitions recorded on this host (see `ray-accel start`)")
    if not status.gcs_alive:
        raise RayAccelError(f"no cluster: the GCS at {status.gcs_address} recorded on this host is not running")
    auth.apply(status.auth)
    # This command's stdout is its result: what Ray pushes to drivers goes to stderr.
    pushed_messages_to_stderr()
    export.connect(status.gcs_address)


@dataclass(frozen=True)
class Orphans:
    """What `status` adds from this host's exporters; the fields are its JSON keys."""

    orphans: tuple[OrphanReading, ...]
    orphan_errors: tuple[str, ...] = ()


def host_orphans(status: HostStatus) -> Orphans:
    """The orphans of this host's live partitions, from their exporters
    (connects as a driver, and leaves); a failure to ask is reported, not raised."""
    import ray

    from ray_accel.metrics import export
    from ray_accel.metrics.collect import OrphanReading

    live = {p.node_id: p.partition for p in status.partitions if p.alive and p.node_id}
    orphans: list[OrphanReading] = []
    errors: list[str] = []
    try:
        connect_to_recorded_cluster(status)
        for node_id, snap in export.snapshots(live, timeout_s=5.0).items():
            if isinstance(snap, str) or not snap:
                errors.append(f"{live[node_id]}: {snap or 'no sample yet'}")
            else:
                orphans += [load(OrphanReading, o) for o in snap.get("orphans", [])]
    except Exception as e:
        return Orphans((), (f"metrics exporters not reachable: {type(e).__name__}: {e}",))
    finally:
        ray.shutdown()
    return Orphans(tuple(orphans), tuple(errors))
