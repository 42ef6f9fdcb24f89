"""Asking the GCS directly, without a driver (Ray 2.60:
`ray._private.state.GlobalState` over `ray._raylet.GcsClientOptions`, and
`ray._raylet.GcsClient` for a drain, as `ray drain-node` does,
ray/scripts/scripts.py `drain_node`).

Every call here blocks until the GCS answers (Ray's client waits for an
absent GCS); callers that must not hang bound them (`ray_accel.cluster.gcs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ray_accel.rayapi.feature import RayApiMissing, attr, method, missing, module, require_params

STATE = "ray._private.state"
RAYLET = "ray._raylet"
# What `ray drain-node --reason DRAIN_NODE_REASON_PREEMPTION` sends: a
# request the raylet may not reject (InnerGcsClient.drain_node's docstring).
DRAIN_REASON_PREEMPTION = "DRAIN_NODE_REASON_PREEMPTION"
CREATE_PARAMS = ("gcs_address", "cluster_id_hex", "allow_cluster_id_nil", "fetch_cluster_id_if_nil")
DRAIN_PARAMS = ("node_id", "reason", "reason_message", "deadline_timestamp_ms", "timeout")


@dataclass(frozen=True)
class GcsNode:
    """One row of the GCS node table, with its resources."""

    node_id: str
    alive: bool
    total: Mapping[str, float] = field(default_factory=dict)
    available: Mapping[str, float] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    ip: str = ""
    hostname: str = ""
    # Why a dead node died, by Ray's name (AUTOSCALER_DRAIN_PREEMPTED: a
    # drain took it; its number where this Ray has no name), and the message
    # given with it; "" for a live node.
    death_reason: str = ""
    death_message: str = ""


@dataclass(frozen=True)
class DrainReply:
    accepted: bool
    rejection: str  # the raylet's reason when not accepted; "" otherwise


def _global_state(address: str) -> Any:
    create = attr(attr(module(RAYLET), "GcsClientOptions", RAYLET), "create", f"{RAYLET}.GcsClientOptions")
    require_params(create, CREATE_PARAMS, f"{RAYLET}.GcsClientOptions.create")
    gs = attr(module(STATE), "GlobalState", STATE)()
    init = attr(gs, "_initialize_global_state", f"{STATE}.GlobalState")
    init(create(address, None, allow_cluster_id_nil=True, fetch_cluster_id_if_nil=False))
    return gs


def read_nodes(address: str) -> tuple[GcsNode, ...]:
    """Every node the GCS at `address` knows, alive or dead, with its total
    and available resources and its labels."""
    gs = _global_state(address)
    where = f"{STATE}.GlobalState"
    calls = ("total_resources_per_node", "available_resources_per_node", "node_table")
    total, avail, table = (method(gs, name, where)() for name in calls)
    reasons = _death_reasons()
    return tuple(
        GcsNode(
            node_id=n["NodeID"],
            alive=bool(n["Alive"]),
            total=dict(total.get(n["NodeID"], {})),
            available=dict(avail.get(n["NodeID"], {})),
            labels=dict(n.get("Labels", {})),
            ip=n.get("NodeManagerAddress", ""),
            hostname=n.get("NodeManagerHostname", ""),
            death_reason=reasons.get(code, str(code)) if (code := int(n.get("DeathReason") or 0)) else "",
            death_message=str(n.get("DeathReasonMessage") or ""),
        )
        for n in table
    )


def _death_reasons() -> Mapping[int, str]:
    """Ray's names for a node's death reasons (`NodeDeathInfo.Reason`) by
    number; a number this Ray's protocol has no name for is shown as text."""
    try:
        proto = module("ray.core.generated.common_pb2")
        reasons = attr(attr(proto, "NodeDeathInfo", "ray.core.generated.common_pb2"), "Reason", "NodeDeathInfo")
    except RayApiMissing:
        return {}
    return {number: name for name, number in reasons.items()}


def drain_reason(name: str = DRAIN_REASON_PREEMPTION) -> int:
    """The `DrainNodeReason` enum value Ray's protocol gives `name`."""
    pb = module("ray.core.generated.autoscaler_pb2")
    reasons = attr(pb, "DrainNodeReason", "ray.core.generated.autoscaler_pb2")
    try:
        return int(reasons.Value(name))
    except ValueError:
        raise missing(f"ray.core.generated.autoscaler_pb2.DrainNodeReason has no {name}") from None


def drain_node(
    address: str,
    node_id: str,
    reason_message: str,
    deadline_ms: int = 0,
    timeout_s: float | None = None,
    client: Any = None,
) -> DrainReply:
    """Ask the GCS at `address` to drain the node `node_id` (hex) for
    preemption: it takes no new work and its workloads are told; `deadline_ms`
    (ms since the epoch, 0 for none) is when it will be stopped. `client`: an
    existing GCS client (a new one otherwise, as `ray drain-node` makes it)."""
    reason = drain_reason()
    gcs = attr(module(RAYLET), "GcsClient", RAYLET)(address=address) if client is None else client
    drain = method(gcs, "drain_node", f"{RAYLET}.GcsClient")
    require_params(drain, DRAIN_PARAMS, f"{RAYLET}.GcsClient.drain_node")
    # The parameters just checked, by name.
    values = (node_id, reason, reason_message, deadline_ms, timeout_s)
    accepted, rejection = drain(**dict(zip(DRAIN_PARAMS, values, strict=True)))
    return DrainReply(bool(accepted), str(rejection or ""))
