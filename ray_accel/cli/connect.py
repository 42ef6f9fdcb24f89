"""Connecting as a driver to the cluster this host's record names (`top`,
`jobs`, `status`), and what this host's exporters say once connected."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ray_accel.core.reader import load

if TYPE_CHECKING:  # the status module is imported only by the commands that show it
    from ray_accel.cluster.record import HostRecord
    from ray_accel.cluster.status import HostStatus
    from ray_accel.metrics.collect import OrphanReading, WorkloadJson
    from ray_accel.rayapi.gcs import GcsNode


def connect_to_recorded_cluster() -> tuple[HostRecord, dict[str, GcsNode]]:
    """Connect as a driver to the cluster this host's record names; the
    record and the GCS's node table. "No cluster" before anything is set up
    when none is recorded or its GCS does not answer (`status.cluster_nodes`):
    never `ray.init()` without an address, which would start one."""
    from ray_accel.cluster import auth
    from ray_accel.cluster.status import cluster_nodes
    from ray_accel.metrics import snapshots
    from ray_accel.rayapi.driver import pushed_messages_to_stderr, without_arrow_serializers

    record, nodes = cluster_nodes()
    auth.apply(record.auth)
    # This command's stdout is its result: what Ray pushes to drivers goes to stderr.
    pushed_messages_to_stderr()
    # It reads snapshots (dicts): Ray Data's serializers would only cost their imports.
    without_arrow_serializers()
    snapshots.connect(record.gcs_address)
    return record, nodes


def leave_cluster() -> None:
    """Disconnect this command's driver now. Left to Ray's exit hook, the
    disconnect would first wait half a second for log lines to print (Ray
    2.60, `ray._private.worker.shutdown` with `_exiting_interpreter`), which a
    CLI driver (`log_to_driver=False`) never prints. Without Ray imported
    there is nothing to leave (and no import to pay for)."""
    ray = sys.modules.get("ray")
    if ray is not None:
        ray.shutdown()


@dataclass(frozen=True)
class FromExporters:
    """What `status` adds from this host's exporters; the fields are its JSON
    keys. `orphan_errors`: the exporters that did not answer (so neither
    their orphans nor their workloads are known), and why."""

    orphans: tuple[OrphanReading, ...]
    orphan_errors: tuple[str, ...] = ()
    # Each workload as `top --json` lists it (`WorkloadReading.to_json`): a Serve replica's names in it.
    workloads: tuple[WorkloadJson, ...] = ()


def from_exporters(status: HostStatus) -> FromExporters:
    """The orphans and workloads of this host's live partitions, from their
    exporters (connects as a driver, and leaves); a failure to ask is
    reported, not raised."""
    from ray_accel.metrics import snapshots
    from ray_accel.metrics.collect import OrphanReading

    live = {p.node_id: p.partition for p in status.partitions if p.alive and p.node_id}
    orphans: list[OrphanReading] = []
    workloads: list[WorkloadJson] = []
    errors: list[str] = []
    try:
        connect_to_recorded_cluster()
        for node_id, snap in snapshots.snapshots(live, timeout_s=5.0).items():
            if isinstance(snap, str) or not snap:
                errors.append(f"{live[node_id]}: {snap or 'no sample yet'}")
            else:
                orphans += [load(OrphanReading, o) for o in snap.get("orphans", [])]
                workloads += snap.get("workloads", [])
    except Exception as e:
        return FromExporters((), (f"metrics exporters not reachable: {type(e).__name__}: {e}",))
    finally:
        leave_cluster()
    return FromExporters(tuple(orphans), tuple(errors), tuple(workloads))
