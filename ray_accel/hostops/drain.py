"""A drain through Ray: the GCS's DrainNode with reason
`DRAIN_NODE_REASON_PREEMPTION`, a message and a deadline, as `ray drain-node`
sends it. Asking twice is harmless: a draining raylet keeps the first request
(its deadline too), so a change that crashed may ask again."""

from __future__ import annotations

from ray_accel.cluster import auth
from ray_accel.cluster.record import HostRecord
from ray_accel.core.errors import RayAccelError
from ray_accel.rayapi import gcs as rayapi_gcs
from ray_accel.rayapi.feature import RayApiMissing
from ray_accel.rayapi.gcs import GcsError, answer_within

GCS_TIMEOUT_S = 15.0


def drain(record: HostRecord, node_id: str, message: str, deadline: float | None) -> None:
    """Ask the GCS to drain `node_id` for preemption with `message`, the way
    `ray drain-node` does; `RayAccelError` when it is not accepted."""
    auth.apply(record.auth)
    deadline_ms = 0 if deadline is None else int(deadline * 1000)
    try:
        reply = answer_within(
            lambda: rayapi_gcs.drain_node(record.gcs_address, node_id, message[:1000], deadline_ms, GCS_TIMEOUT_S),
            GCS_TIMEOUT_S + 5,
            f"the GCS at {record.gcs_address}",
        )
    except (GcsError, RayApiMissing) as e:
        raise RayAccelError(f"drain of {node_id[:12]} failed: {e}") from None
    if reply is None:
        raise RayAccelError(f"drain of {node_id[:12]}: the GCS at {record.gcs_address} did not answer")
    if not reply.accepted:
        raise RayAccelError(f"drain of {node_id[:12]} was rejected: {reply.rejection}")
