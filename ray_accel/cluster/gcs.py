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
from typing import TypeVar

from ray_accel.cluster import auth
from ray_accel.core.errors import RayAccelError
from ray_accel.rayapi import gcs as rayapi_gcs
from ray_accel.rayapi.feature import RayApiMissing
from ray_accel.rayapi.gcs import GcsNode

Progress = Callable[[str], None]
T = TypeVar("T")


class GcsError(RayAccelError):
    """The GCS answered a query with an error."""


def answer_within(query: Callable[[], T], timeout_s: float, what: str) -> T | None:
    """`query()`'s result, None when it has not returned within `timeout_s`
    (it runs on, in a daemon thread: Ray's client waits for an absent GCS),
    `GcsError` naming `what` and the cause when it raised, `RayApiMissing`
    as it is."""
    got: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            got.append(query())
        except BaseException as e:  # carried to the caller's thread
            failed.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout_s)
    if failed and isinstance(failed[0], RayApiMissing):
        raise failed[0]
    if failed:
        raise GcsError(f"{what} answered with an error: {type(failed[0]).__name__}: {failed[0]}") from failed[0]
    return got[0] if got else None


def gcs_nodes(address: str, timeout_s: float = 5.0, cluster_auth: auth.Auth | None = None) -> dict[str, GcsNode] | None:
    """Node id -> its row of the GCS node table, read from the GCS directly (no
    driver); None if the GCS does not answer within `timeout_s`, `GcsError` if it
    answers with an error."""
    if cluster_auth is not None:
        auth.apply(cluster_auth)
    nodes = answer_within(lambda: rayapi_gcs.read_nodes(address), timeout_s, f"the GCS at {address}")
    return None if nodes is None else {n.node_id: n for n in nodes}


def poll_nodes(
    address: str, said: str | None, progress: Progress, timeout_s: float = 5.0, cluster_auth: auth.Auth | None = None
) -> tuple[dict[str, GcsNode] | None, str | None]:
    """`gcs_nodes`, and the GCS's error (None: it answered or was silent),
    said through `progress` unless it is the one `said` last time."""
    try:
        return gcs_nodes(address, timeout_s, cluster_auth), None
    except GcsError as e:
        if str(e) != said:
            progress(f"warning: {e}")
        return None, str(e)


def wait_registered(address: str, node_ids: Sequence[str], timeout_s: float, progress: Progress) -> None:
    """Wait until every one of `node_ids` is registered and alive, asking
    with the auth this process was given for its raylets (`auth.apply`). A
    GCS error is reported through `progress` each time it changes (the GCS
    may come up later) and named in the timeout's error."""
    deadline = time.monotonic() + timeout_s
    seen = -1
    last_error: str | None = None
    while time.monotonic() < deadline:
        nodes, last_error = poll_nodes(address, last_error, progress)
        up = sum(1 for n in node_ids if nodes and n in nodes and nodes[n].alive)
        if up != seen:
            progress(f"registered {up}/{len(node_ids)} raylets")
            seen = up
        if up == len(node_ids):
            return
        time.sleep(0.3)
    cause = f"; the last query: {last_error}" if last_error else ""
    raise RayAccelError(f"only {seen}/{len(node_ids)} raylets registered with {address} within {timeout_s:g}s{cause}")
