"""Asking the GCS directly, without a driver (Ray 2.60:
`ray._private.state.GlobalState` over `ray._raylet.GcsClientOptions`, and
`ray._raylet.GcsClient` for a drain, as `ray drain-node` does,
ray/scripts/scripts.py `drain_node`): which raylets are registered and alive,
and a drain.

Ray's client waits for an absent GCS, so every query here that must not hang
is bounded (`answer_within`). A GCS that does not answer in time (`None`)
stays distinct from one that answers with an error (`GcsError`, its cause
attached: an auth failure, a refused request): the first may still be
starting, the second will not change by waiting. Queries use the auth this
process was given (`ray_accel.cluster.auth.apply`, by the caller).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ray_accel.core.errors import RayAccelError
from ray_accel.rayapi.feature import RayApiMissing, attr, method, missing, module, require_params

STATE = "ray._private.state"
RAYLET = "ray._raylet"
# What `ray drain-node --reason DRAIN_NODE_REASON_PREEMPTION` sends: a
# request the raylet may not reject (InnerGcsClient.drain_node's docstring).
DRAIN_REASON_PREEMPTION = "DRAIN_NODE_REASON_PREEMPTION"
CREATE_PARAMS = ("gcs_address", "cluster_id_hex", "allow_cluster_id_nil", "fetch_cluster_id_if_nil")
DRAIN_PARAMS = ("node_id", "reason", "reason_message", "deadline_timestamp_ms", "timeout")


@dataclass(frozen=True, kw_only=True)
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
    options = attr(module(RAYLET), "GcsClientOptions", RAYLET)
    create = attr(options, "create", f"{RAYLET}.GcsClientOptions")
    require_params(create, CREATE_PARAMS, f"{RAYLET}.GcsClientOptions.create")
    state = module(STATE)
    gs = attr(state, "GlobalState", STATE)()
    init = attr(gs, "_initialize_global_state", f"{STATE}.GlobalState")
    init(create(address, None, allow_cluster_id_nil=True, fetch_cluster_id_if_nil=False))
    return gs


def read_nodes(address: str) -> tuple[GcsNode, ...]:
    """Every node the GCS at `address` knows, alive or dead, with its total
    and available resources and its labels."""
    gs = _global_state(address)
    where = f"{STATE}.GlobalState"
    total = method(gs, "total_resources_per_node", where)()
    avail = method(gs, "available_resources_per_node", where)()
    table = method(gs, "node_table", where)()
    reasons = _death_reasons()
    out = []
    for n in table:
        node_id = n["NodeID"]
        code = int(n.get("DeathReason") or 0)
        out.append(
            GcsNode(
                node_id=node_id,
                alive=bool(n["Alive"]),
                total=dict(total.get(node_id, {})),
                available=dict(avail.get(node_id, {})),
                labels=dict(n.get("Labels", {})),
                ip=n.get("NodeManagerAddress", ""),
                hostname=n.get("NodeManagerHostname", ""),
                death_reason=reasons.get(code, str(code)) if code else "",
                death_message=str(n.get("DeathReasonMessage") or ""),
            )
        )
    return tuple(out)


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
    # The parameters just checked (DRAIN_PARAMS), by name.
    accepted, rejection = drain(
        node_id=node_id,
        reason=reason,
        reason_message=reason_message,
        deadline_timestamp_ms=deadline_ms,
        timeout=timeout_s,
    )
    return DrainReply(bool(accepted), str(rejection or ""))


Progress = Callable[[str], None]
T = TypeVar("T")


class GcsError(RayAccelError):
    """The GCS answered a query with an error."""


def answer_within(query: Callable[[], T], timeout_s: float, what: str) -> T | None:
    """`query()`'s result, None when it has not returned within `timeout_s`
    (it runs on, in a daemon thread: Ray's client waits for an absent GCS),
    `GcsError` naming `what` and the cause when it raised, `RayApiMissing`
    as it is."""
    # Ray's GCS client and state modules are imported before the clock starts
    # (`import ray` is most of a CLI's second, several seconds on a loaded
    # host): `timeout_s` is for the GCS's answer, not for this process's imports.
    module(RAYLET)
    module(STATE)
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


def gcs_nodes(address: str, timeout_s: float = 5.0) -> dict[str, GcsNode] | None:
    """Node id -> its row of the GCS node table, read from the GCS directly (no
    driver); None if the GCS does not answer within `timeout_s`, `GcsError` if it
    answers with an error."""
    nodes = answer_within(lambda: read_nodes(address), timeout_s, f"the GCS at {address}")
    return None if nodes is None else {n.node_id: n for n in nodes}


def poll_nodes(
    address: str, said: str | None, progress: Progress, timeout_s: float = 5.0
) -> tuple[dict[str, GcsNode] | None, str | None]:
    """`gcs_nodes`, and the GCS's error (None: it answered or was silent),
    said through `progress` unless it is the one `said` last time."""
    try:
        return gcs_nodes(address, timeout_s), None
    except GcsError as e:
        if str(e) != said:
            progress(f"warning: {e}")
        return None, str(e)


def registered_within(
    address: str, node_ids: Sequence[str], timeout_s: float, progress: Progress
) -> tuple[frozenset[str], str | None]:
    """Which of `node_ids` are registered and alive once all are, or after
    `timeout_s`; and the GCS's last error, if its last answer was one."""
    deadline = time.monotonic() + timeout_s
    wanted = set(node_ids)
    seen = -1
    last_error: str | None = None
    up: frozenset[str] = frozenset()
    while True:
        nodes, last_error = poll_nodes(address, last_error, progress)
        up = frozenset(n for n in wanted if nodes and n in nodes and nodes[n].alive)
        if len(up) != seen:
            progress(f"registered {len(up)}/{len(wanted)} raylets")
            seen = len(up)
        if up == wanted or time.monotonic() >= deadline:
            return up, last_error
        time.sleep(0.3)


def wait_registered(address: str, node_ids: Sequence[str], timeout_s: float, progress: Progress) -> None:
    """Wait until every one of `node_ids` is registered and alive, asking
    with the auth this process was given for its raylets (`auth.apply`). A
    GCS error is reported through `progress` each time it changes (the GCS
    may come up later) and named in the timeout's error."""
    up, last_error = registered_within(address, node_ids, timeout_s, progress)
    if len(up) == len(set(node_ids)):
        return
    seen = len(up)
    cause = f"; the last query: {last_error}" if last_error else ""
    raise RayAccelError(f"only {seen}/{len(node_ids)} raylets registered with {address} within {timeout_s:g}s{cause}")
