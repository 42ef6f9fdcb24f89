"""The Ray tier's split into shards (`tests.clusters.shard`) and the order
that keeps a shared cluster's tests together (`tests.clusters.order`): every
module runs in exactly one shard, the same one whatever order pytest-randomly
gave, and the shards end close together."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.clusters import MODULE_SECONDS, UNLISTED_S, order, shard

NAMES = [*MODULE_SECONDS, "tests/integration/test_new.py", "tests/x/test_y.py"]
MODULES = st.lists(st.sampled_from(NAMES), unique=True)


@given(MODULES, st.integers(1, 4), st.randoms())
def test_every_module_in_one_shard_whatever_the_order(modules: list[str], count: int, rnd: object) -> None:
    placed = shard(modules, count)
    shuffled = list(modules)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert placed == shard(shuffled, count)
    assert set(placed) == set(modules) and set(placed.values()) <= set(range(count))
    load = [sum(MODULE_SECONDS.get(m, UNLISTED_S) for m in modules if placed[m] == k) for k in range(count)]
    # Longest-first greedy: no shard ends later than another by more than its longest module.
    longest = max((MODULE_SECONDS.get(m, UNLISTED_S) for m in modules), default=0.0)
    assert max(load) - min(load) <= longest


@pytest.mark.parametrize("count", [2, 3])
def test_the_listed_modules_split_evenly_within_a_tenth(count: int) -> None:
    placed = shard(list(MODULE_SECONDS), count)
    load = [sum(s for m, s in MODULE_SECONDS.items() if placed[m] == k) for k in range(count)]
    assert max(load) - min(load) <= 0.1 * sum(load) / count, load


@given(st.lists(st.one_of(st.none(), st.integers(0, 3))))
def test_order_keeps_each_shared_cluster_s_tests_together(keys: list[int | None]) -> None:
    positions = order(keys)
    assert sorted(positions) == list(range(len(keys)))
    seen = [keys[i] for i in positions]
    groups = [k for i, k in enumerate(seen) if i == 0 or seen[i - 1] != k]
    assert len(groups) == len(set(groups)), "a group appears twice"
