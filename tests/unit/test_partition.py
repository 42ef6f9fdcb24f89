from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray_accel_mock.spec import load_spec

from ray_accel.cluster.raylet import Split
from ray_accel.core.devices import Device
from ray_accel.partition.plan import Mode, PartitionError, plan_partitions
from ray_accel.plugins.traits import DeviceTraits, SplitOrder
from tests.badinput import badinput
from tests.planning import plan_for
from tests.strategies import host_and_partition_count, hosts


@given(host_and_partition_count())
def test_auto_split_is_disjoint_and_covers_the_host(case: tuple[tuple[Device, ...], int]) -> None:
    devices, count = case
    plan = plan_for(devices, "auto-split", count)
    assert len(plan.partitions) == count
    seen = [d for p in plan for d in p.device_ids]
    assert sorted(seen) == sorted(d.id for d in devices)
    assert len(set(seen)) == len(seen)
    cores = [c for p in plan for c in p.core_ids]
    assert sorted(cores) == sorted(c for d in devices for c in d.core_ids)
    assert len({len(p.device_ids) for p in plan}) == 1
    assert plan.unassigned == ()


@given(host_and_partition_count(family="neuron"))
def test_neuron_core_ranges_are_contiguous_and_aligned(case: tuple[tuple[Device, ...], int]) -> None:
    devices, count = case
    for p, q in zip(
        plan_for(devices, "auto-split", count),
        plan_for(devices, "auto-split", count).quality,
        strict=True,
    ):
        assert list(p.core_ids) == list(range(p.core_ids[0], p.core_ids[0] + len(p.core_ids)))
        assert p.core_ids[0] % len(p.core_ids) == 0
        assert q.contiguous and q.aligned


@given(host_and_partition_count())
def test_auto_split_keeps_linked_groups_when_the_topology_allows(case: tuple[tuple[Device, ...], int]) -> None:
    devices, count = case
    plan = plan_for(devices, "auto-split", count)
    all_to_all = len(devices) > 1 and all(len(d.peers) == len(devices) - 1 for d in devices)
    ring = all(len(d.peers) == min(2, len(devices) - 1) for d in devices) and len(devices) > 1
    if all_to_all or (ring and devices[0].family == "neuron"):
        assert all(q.connected for q in plan.quality)
    has_links = any(d.peers for d in devices)
    for p, q in zip(plan, plan.quality, strict=True):
        assert (q.connected is None) == (not has_links), "unknown exactly when the inventory has no links"
        if q.connected is False:
            assert any(p.name in w and "not all linked" in w for w in plan.warnings)


@given(hosts(family="gpu"), st.integers(1, 4))
def test_shared_gives_every_partition_every_gpu(devices: tuple[Device, ...], count: int) -> None:
    plan = plan_for(devices, Mode.SHARED, count)
    assert len(plan.partitions) == count
    assert all(set(p.device_ids) == {d.id for d in devices} for p in plan)


@badinput("exit-code")
@given(hosts(family="neuron"))
def test_shared_is_refused_on_neuron(devices: tuple[Device, ...]) -> None:
    with pytest.raises(PartitionError, match="SHARED mode is impossible on neuron"):
        plan_for(devices, "shared")


@given(hosts(), st.data())
def test_manual_partitions_are_what_was_asked(devices: tuple[Device, ...], data: st.DataObject) -> None:
    n = len(devices)
    cut = data.draw(st.integers(0, n))
    spec = f"a=0-{cut - 1}" if cut else ""
    if cut < n:
        spec += f";b={cut}-{n - 1}" if spec else f"b={cut}-{n - 1}"
    plan = plan_for(devices, "manual", manual=spec)
    assert sorted(d for p in plan for d in p.device_ids) == sorted(d.id for d in devices)


def test_trn1_auto_split_shapes() -> None:
    devices = load_spec("trn1.32xlarge").devices
    for count, cores in [(2, 16), (4, 8), (8, 4), (16, 2)]:
        plan = plan_for(devices, "auto-split", count)
        assert [len(p.core_ids) for p in plan] == [cores] * count
        assert all(q.connected and q.contiguous and q.aligned for q in plan.quality)


def test_p4d_split_keeps_numa_together() -> None:
    plan = plan_for(load_spec("p4d.24xlarge").devices, "auto-split", 2)
    assert [q.numa_nodes for q in plan.quality] == [(0,), (1,)]


def test_gpu_islands_kept_together() -> None:
    # Two NVLink islands {0,2} and {1,3}: index order would split them.
    base = load_spec("p4d.24xlarge").devices[:4]
    ids = [d.id for d in base]
    links = {0: (2,), 2: (0,), 1: (3,), 3: (1,)}
    from dataclasses import replace

    devices = [replace(d, peers=tuple(ids[j] for j in links[i]), numa_node=0) for i, d in enumerate(base)]
    plan = plan_for(devices, "auto-split", 2)
    assert [set(p.core_ids) for p in plan] == [{0, 2}, {1, 3}]
    assert all(q.connected for q in plan.quality)


def _acme(count: int, peers: dict[int, tuple[int, ...]]) -> list[Device]:
    """A third-party family the planner has never heard of."""
    return [
        Device(
            id=f"acme{i}",
            family="acme",
            index=i,
            model="Acme X1",
            memory_bytes=1 << 30,
            core_ids=(i,),
            numa_node=0,
            peers=tuple(f"acme{j}" for j in peers[i]),
        )
        for i in range(count)
    ]


@pytest.mark.parametrize(
    ("split", "blocks"),
    [(SplitOrder.LOCALITY, [{0, 2}, {1, 3}]), (SplitOrder.INDEX_BLOCKS, [{0, 1}, {2, 3}])],
)
def test_the_split_order_is_the_backends_declaration_not_its_family(split: SplitOrder, blocks: list[set[int]]) -> None:
    devices = _acme(4, {0: (2,), 2: (0,), 1: (3,), 3: (1,)})
    plan = plan_partitions(devices, "auto-split", 2, traits=DeviceTraits(split=split))
    assert [set(p.core_ids) for p in plan] == blocks


def test_shared_is_what_the_backend_declares_for_any_family() -> None:
    devices = _acme(2, {0: (), 1: ()})
    with pytest.raises(PartitionError, match="SHARED mode is impossible on acme devices"):
        plan_partitions(devices, "shared", 2, traits=DeviceTraits())
    plan = plan_partitions(devices, "shared", 2, traits=DeviceTraits(shareable=True))
    assert [p.core_ids for p in plan] == [(0, 1), (0, 1)]


@badinput("unnamed")
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"mode": "manual", "manual": "a=0-3;b=3-5"},
            r"neuron:3 \(index 3\) is in both partition 'a' and partition 'b'",
        ),
        ({"mode": "manual", "manual": "a=0-3;b=99"}, "unknown device index 99"),
        ({"mode": "manual", "manual": "a=0;b="}, "partition 'b' has no devices"),
        ({"mode": "manual", "manual": "a=0;a=1"}, "partition 'a' appears twice"),
        ({"mode": "manual", "manual": "a=zz"}, "unknown device 'zz'"),
        ({"mode": "manual"}, "needs a spec"),
        ({"mode": "auto-split", "partitions": 0}, "at least 1, got 0"),
        ({"mode": "auto-split", "partitions": 17}, r"more partitions \(17\) than devices \(16\)"),
        ({"mode": "auto-split", "partitions": 3}, "cannot split 16 devices evenly into 3"),
        ({"mode": "shared"}, "SHARED mode is impossible on neuron"),
        ({"mode": "sideways"}, "unknown mode 'sideways'"),
    ],
)
def test_plan_errors_name_the_offending_value(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(PartitionError, match=message):
        plan_for(load_spec("trn1.32xlarge").devices, **kwargs)  # type: ignore[arg-type]


def test_manual_reports_unassigned_and_accepts_ids() -> None:
    devices = load_spec("trn1.32xlarge").devices
    plan = plan_for(devices, "manual", manual="x=neuron:0,neuron:1;y=2-3")
    assert [p.core_ids for p in plan] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert len(plan.unassigned) == 12
    assert any("in no partition" in w for w in plan.warnings)


@badinput("exit-code")
@given(st.text(alphabet=" \t\n", max_size=4))
def test_an_empty_mode_is_refused_naming_it_never_taken_as_the_default(blank: str) -> None:
    with pytest.raises(PartitionError, match="empty mode") as caught:
        Mode.parse(blank)
    assert repr(blank) in str(caught.value)
    with pytest.raises(PartitionError, match="empty mode"):
        Split.given(blank, None, None, None)


@given(st.sampled_from(list(Mode)), st.sampled_from([str.upper, str.lower, str.title]), st.booleans())
def test_a_mode_parses_in_any_case_with_either_separator(
    mode: Mode, case: Callable[[str], str], underscore: bool
) -> None:
    written = case(mode.value)
    if underscore:
        written = written.replace("-", "_")
    assert Mode.parse(written) is mode
    assert Split.given(written, None, None, None).mode == written
    assert Split.given(None, None, "a=0", None).mode == "manual"
    assert Split.given(None, None, None, None).mode == "auto-split"
