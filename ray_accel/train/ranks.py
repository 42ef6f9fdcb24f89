"""Ranks per raylet, not per IP (pure).

Ray Train V2 groups local ranks by node IP, so with several raylets on one
host a worker can get LOCAL_RANK=3 while seeing 2 devices. A partition is a
raylet; local ranks, local world size and node rank follow it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ray_accel.plugins.runtime import Rank


def assign_ranks(node_ids: Sequence[str]) -> list[Rank]:
    """`node_ids[i]` is the raylet of world rank i."""
    order = list(dict.fromkeys(node_ids))
    seen: dict[str, int] = {}
    out: list[Rank] = []
    for n in node_ids:
        local = seen.get(n, 0)
        seen[n] = local + 1
        out.append(Rank(len(out), len(node_ids), local, node_ids.count(n), order.index(n)))
    return out
