"""`ray-accel stop`: stop exactly the processes `start` started, by PID.

Under the host's lock. The record is checked first: if it names a live
process that is not the one recorded (PID 1, this process, another program
that now has the PID and start time), nothing at all is signalled and the
command exits 2 naming the record.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from ray_accel.cluster import procs, state
from ray_accel.cluster.files import read_bounded
from ray_accel.cluster.record import NodeRecord
from ray_accel.cluster.startargs import flag_value
from ray_accel.rayapi import address as rayapi_address
from ray_accel.rayapi.feature import RayApiMissing

log = logging.getLogger(__name__)


def stop(grace_s: float = 5.0) -> dict[str, Any]:
    if not state.state_dir().exists():
        return _nothing()
    with state.host_lock("stop"):
        record = state.load()
        if record is None:
            return _nothing()
        state.check_host(record, "stop")
        checks = procs.require_trusted(record, str(state.state_file()), "stop")
        # Tell a `start --block` watching these partitions that this is asked for.
        state.save(replace(record, stopping=True))
        parts = record.partitions
        # Worker raylets first, the head (GCS) last, so no raylet sees its GCS vanish.
        ordered = [p for p in parts if not p.head] + [p for p in parts if p.head]
        signalled: list[int] = []
        for p in ordered:
            signalled += procs.terminate([r.record for r in p.processes if checks[r].ours], grace_s)
        if record.head:
            forget_cluster_address(record)
        state.clear()
    stopped = [p.name for p in ordered]
    return {
        "stopped": stopped,
        "pids": signalled,
        "message": f"stopped {', '.join(stopped)} ({len(signalled)} processes)",
    }


def _nothing() -> dict[str, Any]:
    return {"stopped": [], "pids": [], "message": "nothing to stop: no partitions recorded"}


def forget_cluster_address(record: NodeRecord) -> None:
    """Remove Ray's "current cluster" file if it names the head we stopped, as
    `ray stop` does; a later plain `ray.init()` would try to join it."""
    try:
        path = Path(rayapi_address.address_file(flag_value(record.ray_args, "--temp-dir")))
    except RayApiMissing as e:
        log.warning("ray-accel: %s; Ray's current-cluster file is left as it is", e)
        return
    try:
        if read_bounded(path, 4096).decode("utf-8", "replace").strip() == record.gcs_address:
            path.unlink()
    except (OSError, ValueError):
        pass
