"""Ranks per raylet, not per IP (pure).

Ray Train V2 groups local ranks by node IP, so with several raylets on one
host a worker can get LOCAL_RANK=3 while seeing 2 devices. A partition is a
raylet; local ranks, local world size and node rank follow it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    world_rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int


def assign_ranks(node_ids: Sequence[str]) -> list[Placement]:
    """`node_ids[i]` is the raylet of world rank i."""
    order: list[str] = []
    for n in node_ids:
        if n not in order:
            order.append(n)
    counts = {n: node_ids.count(n) for n in order}
    seen: dict[str, int] = {}
    out: list[Placement] = []
    for n in node_ids:
        local = seen.get(n, 0)
        seen[n] = local + 1
        out.append(Placement(len(out), len(node_ids), local, counts[n], order.index(n)))
    return out
