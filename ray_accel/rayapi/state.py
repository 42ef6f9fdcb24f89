"""The connected driver's view of the cluster beyond `ray.nodes()` (Ray 2.60:
`ray._private.state.available_resources_per_node`)."""

from __future__ import annotations

from ray_accel.rayapi.feature import attr, module

STATE = "ray._private.state"


def available_resources_per_node() -> dict[str, dict[str, float]]:
    """Hex node id -> what is free on that live node now (`ray.init` first)."""
    read = attr(module(STATE), "available_resources_per_node", STATE)
    return {str(k): {str(r): float(n) for r, n in dict(v).items()} for k, v in dict(read()).items()}
