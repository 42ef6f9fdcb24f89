"""Asking the metrics exporters for their snapshots, as `top` and `status`
do: the exporters' names and a driver's connection, without the sampling
(`export`), so a command that only reads imports only this."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

NAMESPACE = "ray-accel"


def actor_name(node_id: str) -> str:
    """The exporter of the raylet with this node id (unique across hosts)."""
    return f"exporter-{node_id}"


def connect(address: str) -> None:
    import ray

    if not ray.is_initialized():
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.WARNING)


def snapshots(node_ids: Iterable[str], timeout_s: float = 10.0) -> dict[str, dict[str, Any] | str]:
    """Each raylet's exporter's latest snapshot, or the reason there is none (connected driver)."""
    import ray

    refs = {}
    out: dict[str, dict[str, Any] | str] = {}
    for node_id in node_ids:
        try:
            refs[node_id] = ray.get_actor(actor_name(node_id), namespace=NAMESPACE).snapshot.remote()
        except Exception as e:
            out[node_id] = f"no metrics exporter: {e}"
    for node_id, ref in refs.items():
        try:
            out[node_id] = ray.get(ref, timeout=timeout_s)
        except Exception as e:
            out[node_id] = f"{type(e).__name__}: {e}"
    return out
