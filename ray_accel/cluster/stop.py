"""`ray-accel stop`: stop exactly the processes `start` started, by PID."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ray_accel.cluster import procs, state
from ray_accel.cluster.raylet import all_pids


def stop(grace_s: float = 5.0) -> dict[str, Any]:
    record = state.load()
    if record is None:
        return {"stopped": [], "pids": [], "message": "nothing to stop: no partitions recorded"}
    parts = record["partitions"]
    # Worker raylets first, the head (GCS) last, so no raylet sees its GCS vanish.
    ordered = [p for p in parts if not p.get("head")] + [p for p in parts if p.get("head")]
    signalled: list[int] = []
    for p in ordered:
        signalled += procs.terminate(all_pids([p]), grace_s)
    if record.get("head"):
        forget_cluster_address(record)
    state.clear()
    stopped = [p["partition"] for p in ordered]
    return {
        "stopped": stopped,
        "pids": signalled,
        "message": f"stopped {', '.join(stopped)} ({len(signalled)} processes)",
    }


def flag_value(args: Sequence[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def forget_cluster_address(record: dict[str, Any]) -> None:
    """Remove Ray's "current cluster" file if it names the head we stopped, as
    `ray stop` does; a later plain `ray.init()` would try to join it."""
    from ray._common.utils import get_ray_address_file

    path = Path(get_ray_address_file(flag_value(record.get("ray_args", []), "--temp-dir")))
    try:
        if path.read_text().strip() == record.get("gcs_address"):
            path.unlink()
    except OSError:
        pass
