"""A repartition's plan (`ray_accel.cluster.resplit`): the record's partitions
against a new split, per partition kept, restarted, removed or added."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray_accel_mock.spec import load_spec

from ray_accel.bridge.managers import BridgeSpec
from ray_accel.cluster.auth import Auth
from ray_accel.cluster.host import port_blocks
from ray_accel.cluster.raylet import Split
from ray_accel.cluster.record import HostRecord, PartitionEntry
from ray_accel.cluster.resplit import ChangeKind, out_of_service, resplit
from ray_accel.core.devices import Device
from ray_accel.core.health_state import PartitionState, PartState
from ray_accel.core.reader import dump
from ray_accel.partition.plan import Partition, PartitionError
from tests.planning import plan_for, traits_for
from tests.strategies import hosts

TRN1 = load_spec("trn1.32xlarge").devices
FOUR = "a=0-3;b=4-7;c=8-11;d=12-15"


def record_of(devices: Sequence[Device], parts: Sequence[Partition]) -> HostRecord:
    """A record of `parts` started on `devices` (processes and ports do not matter to the plan)."""
    blocks = port_blocks(21000, [184] * len(parts), client_server=False)
    spec = BridgeSpec(
        resource_name="units",
        visible_ids_env="VISIBLE",
        family=devices[0].family,
        accelerator_type=None,
        unit_ids=tuple(c for d in devices for c in d.core_ids),
        backend="mock",
        traits=traits_for(devices),
    )
    entries = tuple(
        PartitionEntry(
            name=p.name,
            device_ids=p.device_ids,
            core_ids=p.core_ids,
            head=False,
            ports=blocks[i],
            processes=(),
            node_id="ab" * 28,
        )
        for i, p in enumerate(parts)
    )
    return HostRecord(
        host="host",
        host_ip="10.0.0.1",
        created=1.0,
        head=True,
        mode="manual",
        spec=spec,
        ray_args=(),
        gcs_address="10.0.0.1:6379",
        gcs_port=6379,
        auth=Auth("none", None, ""),
        partitions=entries,
    )


def started(spec: str) -> HostRecord:
    return record_of(TRN1, plan_for(TRN1, "manual", manual=spec).partitions)


def actions(record: HostRecord, split: Split, out: frozenset[str] = frozenset()) -> dict[str, str]:
    return {c.partition: c.action.value for c in resplit(record, TRN1, split, out).changes}


def test_merging_two_partitions_keeps_the_others() -> None:
    plan = resplit(started(FOUR), TRN1, Split("manual", manual="a=0-3;b=4-7;cd=8-15"), frozenset())
    assert {c.partition: c.action.value for c in plan.changes} == {
        "a": "kept", "b": "kept", "c": "removed", "d": "removed", "cd": "added",
    }  # fmt: skip
    assert plan.changed
    cd = dump(plan.view())["partitions"][-1]  # type: ignore[index,call-overload]
    # The share and ports of a partition that starts come with the change's whole plan (`plan_change`).
    assert cd == {
        "partition": "cd", "action": "added", "devices": [f"neuron:{i}" for i in range(8, 16)], "share": None,
        "ports": None,
    }  # fmt: skip


def test_the_same_split_changes_nothing() -> None:
    plan = resplit(started(FOUR), TRN1, Split("manual", manual=FOUR), frozenset())
    assert not plan.changed
    assert dump(plan.view()) == {"changes": False, "partitions": [dump(c) for c in plan.changes], "warnings": []}


def test_same_name_other_devices_restarts() -> None:
    got = actions(started(FOUR), Split("manual", manual="a=0-3;b=4-7;c=8-13;d=14-15"))
    assert got == {"a": "kept", "b": "kept", "c": "restarted", "d": "restarted"}


def test_a_partition_serving_fewer_devices_than_planned_is_restarted() -> None:
    record = started(FOUR)
    shrunk = replace(record.partitions[1], out=("neuron:7",), out_core_ids=(14, 15))
    record = record.with_partitions([record.partitions[0], shrunk, *record.partitions[2:]])
    got = actions(record, Split("manual", manual="a=0-3;b=4-6;c=8-11;d=12-15"), out_of_service(record))
    assert got == {"a": "kept", "b": "restarted", "c": "kept", "d": "kept"}


def shrunk_b(state: PartState = PartState.SHRUNK) -> HostRecord:
    """FOUR with neuron:5 out of b (b serves 4, 6 and 7), b in `state`."""
    record = started(FOUR)
    b = replace(record.partitions[1], out=("neuron:5",), out_core_ids=(10, 11), health=PartitionState(state))
    return record.with_partitions([record.partitions[0], b, *record.partitions[2:]])


def test_a_shrunk_partition_named_as_planned_is_kept_with_its_device_still_out() -> None:
    # The split that names b whole (4-7) while neuron:5 is out of it: b is the
    # partition holding it out, so b keeps running shrunk (a restart would
    # drain what it serves for nothing) and the decider returns the device later.
    record = shrunk_b()
    plan = resplit(record, TRN1, Split("manual", manual="a=0-3;b=4-7;cd=8-15"), out_of_service(record))
    assert {c.partition: c.action.value for c in plan.changes} == {
        "a": "kept", "b": "kept", "c": "removed", "d": "removed", "cd": "added",
    }  # fmt: skip
    (b,) = [c for c in plan.changes if c.partition == "b"]
    assert b.devices == ("neuron:4", "neuron:6", "neuron:7"), "what it serves after: without the device out"
    assert not resplit(record, TRN1, Split("manual", manual=FOUR), out_of_service(record)).changed


@pytest.mark.parametrize(
    ("state", "manual"),
    [
        (PartState.SHRUNK, "a=0-3;b=4-5;c=6-11;d=12-15"),  # b other devices: neuron:5 would serve
        (PartState.SHRUNK, "a=0-3;bc=4-11;d=12-15"),  # another partition takes it
        (PartState.DRAINING, FOUR),  # the decider drains b: its own to bring back
        (PartState.STOPPED, FOUR),
    ],
)
def test_a_device_out_of_service_is_refused_anywhere_else(state: PartState, manual: str) -> None:
    record = shrunk_b(state)
    with pytest.raises(PartitionError, match="device neuron:5 is out of service"):
        resplit(record, TRN1, Split("manual", manual=manual), out_of_service(record))


def test_auto_split_plans_without_devices_out_of_service() -> None:
    record = started(FOUR)
    plan = resplit(record, TRN1, Split("auto-split", partitions=3), frozenset({"neuron:15"}))
    added = plan.of(ChangeKind.ADDED)
    assert [c.partition for c in added] == ["p0", "p1", "p2"]
    assert all(len(c.devices) == 5 for c in added)
    assert "neuron:15" not in {d for c in added for d in c.devices}


@pytest.mark.parametrize(
    ("split", "needle"),
    [
        (Split("manual", manual="a=0-3;b=3-7;cd=8-15"), "device neuron:3 (index 3) is in both partition 'a' and"),
        (Split("manual", manual="a=0-3;b=4-7;cd=8-16"), "unknown device index 16"),
        (Split("manual", manual="a=0-3;b=4-7;cd=8-15"), "device neuron:12 is out of service"),
        (Split("auto-split", partitions=17), "more partitions (17) than devices (15)"),
        (Split("auto-split", partitions=0), "--partitions must be at least 1, got 0"),
    ],
)
def test_bad_input_names_the_value(split: Split, needle: str) -> None:
    with pytest.raises(PartitionError) as e:
        resplit(started(FOUR), TRN1, split, frozenset({"neuron:12"}))
    assert needle in str(e.value)


def test_the_first_partition_changes_like_any() -> None:
    # The GCS runs on the head raylet, no partition: the first may be restarted or removed too.
    got = actions(started(FOUR), Split("manual", manual="a=0-7;b=8-11"))
    assert got == {"a": "restarted", "b": "restarted", "c": "removed", "d": "removed"}
    assert actions(started(FOUR), Split("manual", manual="b=4-7;cd=8-11"))["a"] == "removed"


@st.composite
def host_and_two_splits(draw: st.DrawFn) -> tuple[tuple[Device, ...], str, str, frozenset[str]]:
    devices = draw(hosts())

    def spec() -> str:
        # Consecutive blocks of random sizes, named from a small pool so names recur between splits.
        sizes, left = [], len(devices)
        while left:
            sizes.append(draw(st.integers(1, left)))
            left -= sizes[-1]
        names = draw(st.permutations([f"n{i}" for i in range(max(len(sizes), 4))]))
        start, parts = 0, []
        for name, size in zip(names, sizes, strict=False):
            parts.append(f"{name}={start}-{start + size - 1}")
            start += size
        return ";".join(parts)

    out = draw(st.frozensets(st.sampled_from([d.id for d in devices]), max_size=2))
    return devices, spec(), spec(), out


@given(host_and_two_splits())
def test_every_partition_has_one_action_and_kept_means_the_same(
    case: tuple[tuple[Device, ...], str, str, frozenset[str]],
) -> None:
    devices, before, after, out = case
    record = record_of(devices, plan_for(devices, "manual", manual=before).partitions)
    new = plan_for(devices, "manual", manual=after)
    try:
        plan = resplit(record, devices, Split("manual", manual=after), out)
    except PartitionError as e:
        assert "out of service" in str(e)
        assert any(d in out for p in new for d in p.device_ids)
        return
    assert not any(d in out for c in plan.changes if c.part is not None for d in c.devices)
    by_name = {c.partition: c for c in plan.changes}
    assert len(by_name) == len(plan.changes)
    old = {p.name: p for p in record.partitions}
    assert {n for n, c in by_name.items() if c.action is not ChangeKind.ADDED} == set(old)
    assert {n for n, c in by_name.items() if c.action is not ChangeKind.REMOVED} == {p.name for p in new}
    for name, c in by_name.items():
        if c.action is ChangeKind.KEPT:
            assert old[name].device_ids == c.devices and old[name].core_ids == c.part.core_ids  # type: ignore[union-attr]
        if c.action is ChangeKind.RESTARTED:
            assert old[name].device_ids != c.devices
    assert plan.changed == (before != after and [(p.name, p.device_ids) for p in new] != [
        (p.name, p.device_ids) for p in record.partitions
    ])  # fmt: skip


@given(hosts(), st.data())
def test_the_recorded_split_again_changes_nothing(devices: tuple[Device, ...], data: st.DataObject) -> None:
    count = data.draw(st.sampled_from([n for n in range(1, len(devices) + 1) if len(devices) % n == 0]))
    record = record_of(devices, plan_for(devices, "auto-split", count).partitions)
    assert not resplit(record, devices, Split("auto-split", partitions=count), frozenset()).changed
