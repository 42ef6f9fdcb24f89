"""The GCS's draining nodes, read back for tests of a drain (the product
drains through `ray_accel.rayapi.gcs` and never reads them)."""

from __future__ import annotations

from ray_accel.rayapi import gcs


def draining_nodes(address: str) -> dict[str, int]:
    """Hex node id -> the drain's deadline (ms since the epoch; 0: none) of
    every live node the GCS at `address` is draining. A raylet with nothing
    running exits as soon as it is drained: it is then dead in `read_nodes`
    with `death_reason` AUTOSCALER_DRAIN_PREEMPTED."""
    found = gcs._global_state(address).get_draining_nodes()
    return {str(k): int(v) for k, v in dict(found).items()}
