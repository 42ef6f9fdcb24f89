"""Dividing a host between its partitions: pure functions,
with property tests, and the NUMA node tree they read."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_accel.cluster.host import (
    HostResources,
    Share,
    ShareError,
    divide,
    place_cpus,
    split_amount,
    split_cpus,
    split_whole,
)
from ray_accel.core.numa import CpuListError, NumaTopology, format_cpulist, parse_cpulist, read_topology
from ray_accel.core.reader import load
from tests.badinput import badinput

weights_st = st.lists(st.integers(0, 64), min_size=1, max_size=16)


@given(st.integers(0, 10**12), weights_st)
def test_split_whole_sums_to_the_total_and_stays_proportional(total: int, weights: list[int]) -> None:
    parts = split_whole(total, weights)
    assert sum(parts) == total
    assert all(p >= 0 for p in parts)
    ws = weights if sum(weights) else [1] * len(weights)
    quotas = [Fraction(total * w, sum(ws)) for w in ws]
    if total >= len(ws):
        assert min(parts) >= 1, "no partition gets zero while the total allows one each"
    if all(q >= 1 for q in quotas) or total < len(ws):
        # No floor had to be raised: plain largest remainder, each part within 1 of its quota.
        assert all(abs(p - q) < 1 for p, q in zip(parts, quotas, strict=True))
    for i in range(len(ws)):
        for j in range(len(ws)):
            if ws[i] > ws[j]:
                assert parts[i] >= parts[j], "a larger partition never gets less"


@given(st.integers(0, 40), st.integers(1, 40))
def test_more_partitions_than_cpus_gives_some_none_and_keeps_the_sum(cpus: int, n: int) -> None:
    parts = split_whole(cpus, [2] * n)
    assert sum(parts) == cpus
    if cpus < n:
        # Fewer CPUs than partitions: the first `cpus` partitions get one each, the rest none.
        assert parts == [1] * cpus + [0] * (n - cpus)
    else:
        assert max(parts) - min(parts) <= 1


@given(st.integers(0, 64), weights_st, st.data())
def test_split_cpus_by_group_sums_and_never_starves_when_avoidable(
    total: int, weights: list[int], data: st.DataObject
) -> None:
    groups = data.draw(st.lists(st.sampled_from(["n0", "n1", None]), min_size=len(weights), max_size=len(weights)))
    parts = split_cpus(total, weights, groups)
    assert sum(parts) == total
    if total >= len(weights):
        assert min(parts) >= 1


def test_split_cpus_counts_each_numa_group_from_its_own_share() -> None:
    # Two partitions on node 0, two on node 1, two CPUs: one per node, not both on node 0.
    assert split_cpus(2, [8, 8, 8, 8], ["n0", "n0", "n1", "n1"]) == [1, 0, 1, 0]
    assert split_whole(2, [8, 8, 8, 8]) == [1, 1, 0, 0]


@given(
    st.one_of(st.integers(0, 10**6), st.integers(0, 10**8).map(lambda u: u / 10000)),
    weights_st,
)
def test_split_amount_sums_in_rays_units(total: float, weights: list[int]) -> None:
    parts = split_amount(total, weights)
    assert round(sum(Fraction(p) for p in parts) * 10000) == round(Fraction(total) * 10000)
    if float(total).is_integer():
        assert all(p.is_integer() for p in parts), "whole amounts stay whole"
    for p in parts:
        assert abs(p * 10000 - round(p * 10000)) < 1e-6


@badinput("unnamed")
def test_split_refuses_bad_amounts() -> None:
    with pytest.raises(ShareError, match="negative"):
        split_whole(-1, [1])
    with pytest.raises(ShareError):
        split_amount(float("nan"), [1])


@given(st.sets(st.integers(0, 4095), max_size=200))
def test_cpulist_round_trip(cpus: set[int]) -> None:
    assert parse_cpulist(format_cpulist(cpus)) == frozenset(cpus)


@badinput("unnamed")
@pytest.mark.parametrize("text", ["a", "3-1", "1,,2", "0-", "-1", "1-99999999"])
def test_bad_cpulist_names_the_entry(text: str) -> None:
    with pytest.raises(CpuListError, match="CPU list"):
        parse_cpulist(text)


def node_tree(root: Path, nodes: dict[int, str]) -> Path:
    """A NUMA node tree laid out as Linux does (kernel Documentation/ABI/stable/
    sysfs-devices-node: nodeX/cpulist, and an `online` list of nodes)."""
    for n, cpulist in nodes.items():
        (root / f"node{n}").mkdir(parents=True)
        (root / f"node{n}" / "cpulist").write_text(cpulist + "\n")
    (root / "online").write_text(format_cpulist(nodes) + "\n")
    (root / "possible").write_text(format_cpulist(nodes) + "\n")
    return root


def test_read_topology(tmp_path: Path) -> None:
    topo = read_topology(str(node_tree(tmp_path / "t", {0: "0-3,8-11", 1: "4-7,12-15", 2: ""})))
    assert topo.error is None
    assert topo.nodes[0] == frozenset({0, 1, 2, 3, 8, 9, 10, 11})
    assert set(topo.cpu_nodes) == {0, 1}, "a memory-only node has no CPUs to run a raylet on"
    missing = read_topology(str(tmp_path / "absent"))
    assert missing.error is not None and "absent" in missing.error
    descending = node_tree(tmp_path / "descending", {0: "0-3", 1: "7-4"})
    assert read_topology(str(descending)).error == f"{descending}/node1/cpulist: CPU list '7-4\\n': " + (
        "descending range '7-4' in visibility mask '7-4\\n'"
    )
    (descending / "node1" / "cpulist").unlink()
    (descending / "node1" / "cpulist").mkdir()  # not a file: unreadable
    assert "cannot read" in (read_topology(str(descending)).error or "")
    bad = node_tree(tmp_path / "bad", {0: "0-x"})
    assert "cpulist" in (read_topology(str(bad)).error or "")


def test_read_topology_env_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = node_tree(tmp_path / "t", {0: "0", 1: "1"})
    monkeypatch.setenv("RAYACCEL_NUMA_ROOT", str(root))
    assert read_topology().nodes == {0: frozenset({0}), 1: frozenset({1})}


TWO = NumaTopology("/fake", {0: frozenset({0, 1}), 1: frozenset({2, 3})})


def test_place_cpus_pins_single_node_partitions_and_says_why_not() -> None:
    placed, pinning = place_cpus([(0,), (1,), (0, 1), (-1,), (3,)], TWO, {0, 1, 2, 3})
    assert pinning == "on"
    assert placed[0] == ((0, 1), "NUMA node 0")
    assert placed[1] == ((2, 3), "NUMA node 1")
    assert placed[2][0] is None and "NUMA nodes 0,1" in placed[2][1]
    assert placed[3][0] is None and "unknown" in placed[3][1]
    assert placed[4][0] is None and "node 3" in placed[4][1]


def test_place_cpus_keeps_to_the_cpus_this_process_may_use() -> None:
    placed, _ = place_cpus([(0,), (1,)], TWO, {1, 2})
    assert placed[0][0] == (1,) and placed[1][0] == (2,)
    placed, pinning = place_cpus([(0,)], TWO, {2, 3})
    assert placed[0][0] is None and "allowed" in placed[0][1]
    assert pinning.startswith("off")


def test_place_cpus_off_when_topology_unknown_or_single_node() -> None:
    _, pinning = place_cpus([(0,)], NumaTopology("/x", error="cannot read /x"), {0})
    assert pinning == "off: NUMA topology unknown (cannot read /x)"
    _, pinning = place_cpus([(0,)], NumaTopology("/x", {0: frozenset({0, 1})}), {0, 1})
    assert pinning.startswith("off: the host has one NUMA node")


HOST = HostResources(cpus=4, memory=10_000_000_000, object_store_memory=3_000_000_000, resources={"license": 3})


@given(weights_st.filter(lambda w: sum(w) > 0))
def test_divide_counts_the_host_once(weights: list[int]) -> None:
    names = [f"p{i}" for i in range(len(weights))]
    div = divide(names, weights, [(0,)] * len(weights), HOST, TWO, {0, 1, 2, 3})
    assert sum(s.cpus for s in div.shares) == HOST.cpus
    assert sum(s.memory for s in div.shares) == HOST.memory
    assert sum(s.object_store_memory for s in div.shares) == HOST.object_store_memory
    assert sum(s.resources.get("license", 0) for s in div.shares) == 3
    assert all(s.cpu_set == (0, 1) for s in div.shares)
    if len(weights) > HOST.cpus:
        assert any("get 0 CPUs" in w for w in div.warnings)


@badinput("unnamed")
def test_divide_refuses_an_object_store_below_rays_minimum() -> None:
    host = HostResources(cpus=2, memory=10**9, object_store_memory=100 * 2**20)
    with pytest.raises(ShareError, match="p0's object store would be 52428800 bytes"):
        divide(["p0", "p1"], [1, 1], [(), ()], host, TWO, {0}, min_object_store=75 * 2**20)


def test_share_json_round_trip() -> None:
    share = Share(
        partition="p0",
        cpus=2,
        memory=5,
        object_store_memory=6,
        resources={"x": 0.5},
        cpu_set=(0, 1),
        pin_reason="NUMA node 0",
    )
    assert load(Share, share.to_json()) == share
