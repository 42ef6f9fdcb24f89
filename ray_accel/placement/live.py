"""The free model of every live partition, read from Ray.

`view_from_nodes` is pure: it takes what `ray.nodes()` returns (one dict per
raylet: `NodeID`, `Alive`, `NodeManagerAddress`, `Resources` (totals),
`Labels`, ...; Ray 2.60 `ray/_private/state.py` `GlobalState.node_table`) and
what `rayapi.state.available_resources_per_node()` returns (node hex id
-> available resources; a `DeveloperAPI` of Ray 2.60, the per-raylet view that
`ray.available_resources()` sums). `read_view` calls the two. Only raylets
with a partition label are partitions, and which accelerator a partition
serves is what its family and resource labels say (`ray-accel start` writes
them from the backend): a raylet without them is left out, named in
`LiveView.ignored`. A raylet without ray-accel's topology labels still
counts, with its devices unknown (so nothing placed there counts as linked or
aligned). A partition's host is its host's key, from the name and node IP Ray
records (`labels.node_host`): two hosts that share a name are two hosts.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ray_accel.core.errors import InputError
from ray_accel.partition.plan import (
    CONNECTED_LABEL,
    CORES_LABEL,
    DEVICES_LABEL,
    FAMILY_LABEL,
    HOST_LABEL,
    LINKS_LABEL,
    PARTITION_LABEL,
    RESOURCE_LABEL,
    LabelError,
    decode_ids,
    node_host,
)
from ray_accel.placement.model import FreePartition
from ray_accel.rayapi import state as rayapi_state

# Ray's own label naming one raylet (Ray 2.60 `ray._raylet.RAY_NODE_ID_KEY`;
# Ray Train pins its synchronization actor with it).
NODE_ID_LABEL = "ray.io/node-id"
log = logging.getLogger(__name__)
# Ray reports resources as floats; 7.9999999 units are 8.
EPS = 1e-6


@dataclass(frozen=True)
class LiveView:
    """Every live partition's free model, and the label selector that names
    exactly its raylet (the partition label, plus the host where the name is
    not unique)."""

    partitions: tuple[FreePartition, ...]
    selectors: Mapping[tuple[str, str], Mapping[str, str]]
    # Raylets with a partition label that cannot be placed on, each with why.
    ignored: tuple[str, ...] = ()

    def families(self) -> list[tuple[str, str]]:
        return sorted({(p.family, p.resource) for p in self.partitions})


def _ids(labels: Mapping[str, str], key: str) -> tuple[int, ...]:
    try:
        return decode_ids(labels[key]) if key in labels else ()
    except LabelError:
        return ()  # a raylet's labels are data from the cluster: unknown, not fatal


def view_from_nodes(nodes: Sequence[Mapping[str, Any]], available: Mapping[str, Mapping[str, float]]) -> LiveView:
    rows: list[tuple[FreePartition, Mapping[str, str]]] = []
    ignored: list[str] = []
    for node in nodes:
        labels: Mapping[str, str] = node.get("Labels") or {}
        name = labels.get(PARTITION_LABEL)
        if not (node.get("Alive") and name):
            continue
        total: Mapping[str, float] = node.get("Resources") or {}
        family, resource = labels.get(FAMILY_LABEL), labels.get(RESOURCE_LABEL)
        node_id = str(node["NodeID"])
        if not (family and resource):
            missing = " and ".join(k for k, v in ((FAMILY_LABEL, family), (RESOURCE_LABEL, resource)) if not v)
            ignored.append(f"partition {name} (node {node_id}) has no {missing} label: what it serves is unknown")
            continue
        # A raylet not yet in the available table has nothing known free.
        avail = available.get(node_id, {})
        units = math.floor(total.get(resource, 0.0) + EPS)
        free = min(units, max(0, math.floor(avail.get(resource, 0.0) + EPS)))
        cores = _ids(labels, CORES_LABEL)
        connected = {"true": True, "false": False}.get(labels.get(CONNECTED_LABEL, ""))
        host = node_host(str(node.get("NodeManagerHostname") or ""), str(node.get("NodeManagerAddress") or ""), labels)
        part = FreePartition(
            host=host,
            name=name,
            node_id=node_id,
            family=family,
            resource=resource,
            total=units,
            free=free,
            core_ids=cores if len(cores) == units else (),
            device_ids=_ids(labels, DEVICES_LABEL),
            links=frozenset(_ids(labels, LINKS_LABEL)),
            connected=connected,
            cpus_free=float(avail.get("CPU", 0.0)),
        )
        rows.append((part, labels))
    names = Counter(p.name for p, _ in rows)
    keys = Counter(p.key for p, _ in rows)
    selectors: dict[tuple[str, str], Mapping[str, str]] = {}
    parts: list[FreePartition] = []
    for part, labels in sorted(rows, key=lambda r: (r[0].key, r[0].node_id)):
        if keys[part.key] > 1:
            # Two live raylets claim one host and name: only Ray's node id tells them apart.
            part = replace(part, host=f"{part.host}#{part.node_id[:8]}")
        selector = {PARTITION_LABEL: part.name}
        if names[part.name] > 1:
            own = labels.get(HOST_LABEL) == part.host
            selector.update({HOST_LABEL: part.host} if own else {NODE_ID_LABEL: part.node_id})
        selectors[part.key] = selector
        parts.append(part)
    return LiveView(tuple(parts), selectors, tuple(ignored))


def read_view() -> LiveView:
    """The live view of the cluster this driver is connected to (`ray.init` first)."""
    import ray

    if not ray.is_initialized():
        raise InputError("not connected to a Ray cluster: call ray.init(address=...) or ray_accel.init first")
    view = view_from_nodes(ray.nodes(), rayapi_state.available_resources_per_node())
    for why in view.ignored:
        log.warning("ray-accel placement leaves out %s", why)
    return view
