"""Asking the GCS directly (no driver) which raylets are registered and alive."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ray_accel.cluster import auth
from ray_accel.core.errors import RayAccelError

Progress = Callable[[str], None]


def gcs_nodes(
    address: str, timeout_s: float = 5.0, cluster_auth: auth.Auth | None = None
) -> dict[str, dict[str, Any]] | None:
    """Node id -> {alive, total, available, labels, ip, hostname}, read from the GCS directly (no
    driver); None if the GCS does not answer within `timeout_s`."""
    out: dict[str, Any] = {}

    if cluster_auth is not None:
        auth.apply(cluster_auth)

    def query() -> None:
        try:
            _query()
        except Exception as e:
            out["__error__"] = e

    def _query() -> None:
        from ray._private.state import GlobalState
        from ray._raylet import GcsClientOptions

        gs = GlobalState()
        gs._initialize_global_state(
            GcsClientOptions.create(address, None, allow_cluster_id_nil=True, fetch_cluster_id_if_nil=False)
        )
        total = gs.total_resources_per_node()
        avail = gs.available_resources_per_node()
        for n in gs.node_table():
            nid = n["NodeID"]
            out[nid] = {
                "alive": bool(n["Alive"]),
                "total": total.get(nid, {}),
                "available": avail.get(nid, {}),
                "labels": n.get("Labels", {}),
                "ip": n.get("NodeManagerAddress", ""),
                "hostname": n.get("NodeManagerHostname", ""),
            }
        out["__done__"] = True

    t = threading.Thread(target=query, daemon=True)
    t.start()
    t.join(timeout_s)
    out.pop("__error__", None)
    if not out.pop("__done__", False):
        return None
    return out


def wait_registered(
    address: str, node_ids: Sequence[str], timeout_s: float, progress: Progress, cluster_auth: auth.Auth
) -> None:
    deadline = time.monotonic() + timeout_s
    seen = -1
    while time.monotonic() < deadline:
        nodes = gcs_nodes(address, cluster_auth=cluster_auth) or {}
        up = sum(1 for n in node_ids if nodes.get(n, {}).get("alive"))
        if up != seen:
            progress(f"registered {up}/{len(node_ids)} raylets")
            seen = up
        if up == len(node_ids):
            return
        time.sleep(0.3)
    raise RayAccelError(f"only {seen}/{len(node_ids)} raylets registered with {address} within {timeout_s:g}s")
