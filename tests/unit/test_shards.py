"""The Ray tier's shards (tests/shards.py): every module in exactly one
shard, a shared cluster's modules together, the heaviest units spread."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.shards import DEFAULT_WEIGHT, WEIGHTS, ShardError, assign, module_keys, parse_shard


@given(st.integers(0, 50), st.integers(1, 50))
def test_parse_shard_reads_every_index_below_its_count(i: int, n: int) -> None:
    if i < n:
        assert parse_shard(f"{i}/{n}") == (i, n)
    else:
        with pytest.raises(ShardError, match=f"'{i}/{n}'"):
            parse_shard(f"{i}/{n}")


@given(st.text(max_size=12))
def test_parse_shard_names_any_text_it_cannot_read(text: str) -> None:
    try:
        i, n = parse_shard(text)
    except ShardError as e:
        assert repr(text) in str(e)
    else:
        index, count = text.split("/")
        assert (int(index), int(count)) == (i, n) and 0 <= i < n


@pytest.mark.parametrize("text", ["", "1", "0/0", "2/2", "-1/2", "a/2", "0/", "/2", "0/2/3", "\u0661/2"])
def test_parse_shard_refuses(text: str) -> None:
    with pytest.raises(ShardError, match="--shard"):
        parse_shard(text)


MODULES = st.dictionaries(
    st.sampled_from([*WEIGHTS, *(f"tests/integration/test_x{i}.py" for i in range(8))]),
    st.sampled_from([None, "trn1", "trn1x4"]),
)


@given(MODULES, st.integers(1, 4))
def test_every_module_lands_in_one_shard_and_a_clusters_modules_together(
    modules: dict[str, str | None], shards: int
) -> None:
    placed = assign(modules, shards)
    assert placed.keys() == modules.keys()
    assert all(0 <= s < shards for s in placed.values())
    for key in ("trn1", "trn1x4"):
        assert len({placed[m] for m, k in modules.items() if k == key}) <= 1, key


@given(MODULES, st.integers(1, 4))
def test_no_shard_exceeds_another_by_more_than_its_heaviest_unit(modules: dict[str, str | None], shards: int) -> None:
    """Greedy dealing, heaviest first, to the lightest shard: the heaviest
    shard is at most one unit heavier than the lightest."""
    placed = assign(modules, shards)
    units: dict[object, float] = {}
    for m, k in modules.items():
        unit = ("cluster", k) if k is not None else ("module", m)
        units[unit] = units.get(unit, 0.0) + WEIGHTS.get(m, DEFAULT_WEIGHT)
    load = [0.0] * shards
    for m, s in placed.items():
        load[s] += WEIGHTS.get(m, DEFAULT_WEIGHT)
    if units:
        assert max(load) - min(load) <= max(units.values()) + 1e-9


def test_the_suites_two_shards_each_hold_one_shared_cluster_and_about_half_the_seconds() -> None:
    modules = {m: None for m in WEIGHTS} | {
        "tests/integration/test_train.py": "trn1",
        "tests/integration/test_train_context.py": "trn1",
        "tests/integration/test_jobs.py": "trn1x4",
    }
    placed = assign(modules, 2)
    assert placed["tests/integration/test_train.py"] == placed["tests/integration/test_train_context.py"]
    assert placed["tests/integration/test_jobs.py"] != placed["tests/integration/test_train.py"]
    loads = [sum(WEIGHTS[m] for m, s in placed.items() if s == i) for i in (0, 1)]
    assert abs(loads[0] - loads[1]) <= max(WEIGHTS.values())


def test_module_keys_take_the_first_shared_cluster_of_a_module() -> None:
    pairs = [("a.py", None), ("a.py", "trn1"), ("b.py", None), ("c.py", "trn1x4"), ("c.py", "trn1")]
    assert module_keys(pairs) == {"a.py": "trn1", "b.py": None, "c.py": "trn1x4"}
