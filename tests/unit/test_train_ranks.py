from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from ray_accel.train.ranks import assign_ranks

nodes = st.lists(st.sampled_from(["raylet-a", "raylet-b", "raylet-c"]), min_size=1, max_size=16)


@given(nodes)
def test_local_ranks_follow_the_raylet_not_the_ip(node_ids: list[str]) -> None:
    placements = assign_ranks(node_ids)
    sizes = Counter(node_ids)
    for node, p in zip(node_ids, placements, strict=True):
        assert p.local_world_size == sizes[node]
        assert 0 <= p.local_rank < p.local_world_size
        assert p.world_size == len(node_ids)
    for node in sizes:
        mine = [p.local_rank for n, p in zip(node_ids, placements, strict=True) if n == node]
        assert sorted(mine) == list(range(sizes[node]))
    assert sorted({p.node_rank for p in placements}) == list(range(len(sizes)))


def test_two_raylets_on_one_host() -> None:
    # What Ray Train V2 gets wrong: grouping by IP gives LOCAL_RANK 0..3 here.
    p = assign_ranks(["a", "a", "b", "b"])
    assert [(x.local_rank, x.local_world_size, x.node_rank) for x in p] == [(0, 2, 0), (1, 2, 0), (0, 2, 1), (1, 2, 1)]
