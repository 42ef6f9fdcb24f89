"""Asking the GCS directly (no driver) which raylets are registered and alive.

A GCS that does not answer in time (`None`) stays distinct from one that
answers with an error (`GcsError`, its cause attached: an auth failure, a
refused request): the first may still be starting, the second will not
change by waiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ray_accel.cluster import auth
from ray_accel.core.errors import RayAccelError
from ray_accel.rayapi import gcs as rayapi_gcs
from ray_accel.rayapi.feature import RayApiMissing

Progress = Callable[[str], None]
T = TypeVar("T")


class GcsError(RayAccelError):
    """The GCS answered a query with an error."""


def answer_within(query: Callable[[], T], timeout_s: float, what: str) -> T | None:
    """`query()`'s result, None when it has not returned within `timeout_s`
    (it runs on, in a daemon thread: Ray's client waits for an absent GCS),
    `GcsError` naming `what` and the cause when it raised, `RayApiMissing`
    as it is."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = query()
        except BaseException as e:  # carried to the caller's thread
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout_s)
    error = box.get("error")
    if isinstance(error, RayApiMissing):
        raise error
    if error is not None:
        raise GcsError(f"{what} answered with an error: {type(error).__name__}: {error}") from error
    if "value" not in box:
        return None
    value: T = box["value"]
    return value


def gcs_nodes(
    address: str, timeout_s: float = 5.0, cluster_auth: auth.Auth | None = None
) -> dict[str, dict[str, Any]] | None:
    """Node id -> {alive, total, available, labels, ip, hostname}, read from the GCS directly (no
    driver); None if the GCS does not answer within `timeout_s`, `GcsError` if it answers with an
    error."""
    if cluster_auth is not None:
        auth.apply(cluster_auth)
    nodes = answer_within(lambda: rayapi_gcs.read_nodes(address), timeout_s, f"the GCS at {address}")
    if nodes is None:
        return None
    return {
        n.node_id: {
            "alive": n.alive,
            "total": dict(n.total),
            "available": dict(n.available),
            "labels": dict(n.labels),
            "ip": n.ip,
            "hostname": n.hostname,
        }
        for n in nodes
    }


def wait_registered(
    address: str, node_ids: Sequence[str], timeout_s: float, progress: Progress, cluster_auth: auth.Auth
) -> None:
    """Wait until every one of `node_ids` is registered and alive. A GCS
    error is reported through `progress` each time it changes (the GCS may
    come up later) and named in the timeout's error."""
    deadline = time.monotonic() + timeout_s
    seen = -1
    last_error: str | None = None
    while time.monotonic() < deadline:
        try:
            nodes = gcs_nodes(address, cluster_auth=cluster_auth) or {}
            error = None
        except GcsError as e:
            nodes, error = {}, str(e)
        if error != last_error and error is not None:
            progress(f"warning: {error}")
        last_error = error
        up = sum(1 for n in node_ids if nodes.get(n, {}).get("alive"))
        if up != seen:
            progress(f"registered {up}/{len(node_ids)} raylets")
            seen = up
        if up == len(node_ids):
            return
        time.sleep(0.3)
    cause = f"; the last query: {last_error}" if last_error else ""
    raise RayAccelError(f"only {seen}/{len(node_ids)} raylets registered with {address} within {timeout_s:g}s{cause}")
