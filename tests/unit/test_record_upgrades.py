"""Each older shape of the host record is read through its named upgrade.

The files under tests/fixtures/records/ are the shapes the parser read before
its fallbacks became upgrades (each was made from a record of this version,
cut to the shape, and checked to parse then): a version-3 `node.json`, and
each version-4 variant. Each loads through the upgrades named here, to the
values the parser gave it, and is written back as `stop` writes it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ray_accel.cluster.record import (
    LEGACY_BACKEND,
    UPGRADES,
    VERSION,
    HostRecord,
    RecordError,
    dumps,
    parse_record,
    upgrade,
)
from ray_accel.core.health_state import PartitionState, PartState
from ray_accel.core.reader import Cursor
from ray_accel.plugins.traits import DeviceTraits
from tests.badinput import badinput

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"

# Fixture -> the upgrades that change it, in the order they run.
APPLIED = {
    "v3-node.json": (
        "_v3_node_json_to_v4",
        "_v4_before_decider",
        "_v4_before_repartition",
        "_v4_before_head_raylet",
        "_v4_partition_without_share",
        "_v4_to_v5",
    ),
    "v4-decider-state.json": ("_v4_decider_state_to_health", "_v4_to_v5"),
    "v4-without-health.json": ("_v4_before_decider", "_v4_before_repartition", "_v4_to_v5"),
    "v4-head-partition-first.json": ("_v4_before_head_raylet", "_v4_to_v5"),
    "v4-partition-without-share.json": ("_v4_before_decider", "_v4_partition_without_share", "_v4_to_v5"),
    "v4-complete.json": ("_v4_to_v5",),
}


def raw(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RECORDS / name).read_text())
    return data


def load(name: str) -> HostRecord:
    return parse_record((RECORDS / name).read_text(), name)


def test_every_fixture_is_named_and_every_upgrade_is_shown_by_one() -> None:
    assert sorted(p.name for p in RECORDS.glob("*.json")) == sorted(APPLIED)
    named = {step.__name__ for steps in UPGRADES.values() for step in steps}
    assert named == {name for applied in APPLIED.values() for name in applied}
    assert sorted(UPGRADES) == list(range(min(UPGRADES), VERSION)), "one set of upgrades per older version"


@pytest.mark.parametrize("name", sorted(APPLIED))
def test_each_old_shape_goes_through_its_named_upgrades(name: str) -> None:
    data = raw(name)
    upgraded = upgrade(Cursor(data))
    assert upgraded.applied == APPLIED[name]
    assert upgraded.legacy == (data["version"] == 3)
    assert upgraded.record.mapping()["version"] == VERSION
    assert data == raw(name), "an upgrade changes a copy, never the record it reads"
    assert "decider_state" not in json.dumps(upgraded.record.data)


def test_a_current_record_goes_through_none() -> None:
    current = json.loads(dumps(load("v4-complete.json")))
    assert current["version"] == VERSION
    assert upgrade(Cursor(current)).applied == ()


def test_a_version_3_node_json_is_read_as_before_and_written_back_as_3() -> None:
    record = load("v3-node.json")
    assert record.legacy and record.host_ip is None and record.host == "host-a"
    assert record.spec.backend == LEGACY_BACKEND and record.spec.traits == DeviceTraits()
    head = record.partitions[0]
    assert head.head and [p.kind for p in head.processes][:2] == ["gcs_server", "raylet"]
    assert record.head_raylet is None and record.health is None and record.decider is None
    assert all(p.share is None and p.labels == () and p.models == () and p.out == () for p in record.partitions)
    assert all(p.accelerator_type == "Trainium" and p.health == PartitionState() for p in record.partitions)
    written = json.loads(dumps(record))
    assert written["version"] == 3 and "host_ip" not in written
    assert "backend" not in written["spec"] and "traits" not in written["spec"]
    assert parse_record(dumps(record), "node.json") == record


def test_a_decider_state_becomes_the_partitions_health() -> None:
    record = load("v4-decider-state.json")
    stopped, restarting = record.partitions
    assert stopped.health == PartitionState(PartState.STOPPED, detail="stopped by an earlier decider")
    assert restarting.health == PartitionState(PartState.STOPPED, detail="restarting by an earlier decider")
    assert stopped.held and restarting.held
    written = json.loads(dumps(record))
    assert written["version"] == VERSION
    assert [p["health"]["state"] for p in written["partitions"]] == ["stopped", "stopped"]
    assert all("decider_state" not in p for p in written["partitions"])


def test_a_null_decider_state_is_serving() -> None:
    data = raw("v4-decider-state.json")
    data["partitions"][0]["decider_state"] = None
    assert parse_record(json.dumps(data), "host.json").partitions[0].health == PartitionState()


@badinput("traceback")
def test_a_decider_state_of_no_known_value_is_refused_naming_it() -> None:
    data = raw("v4-decider-state.json")
    data["partitions"][1]["decider_state"] = "resting"
    with pytest.raises(RecordError, match=r"partitions\[1\]\.decider_state: 'resting' is not one of stopped"):
        parse_record(json.dumps(data), "host.json")


def test_a_record_from_before_the_decider_has_no_decider() -> None:
    record = load("v4-without-health.json")
    assert record.health is None and record.decider is None and record.repartition is None
    assert record.head_raylet is not None and [p.name for p in record.partitions] == ["p0", "p1"]


def test_a_record_from_before_the_head_raylet_keeps_its_head_partition_first() -> None:
    record = load("v4-head-partition-first.json")
    assert record.head_raylet is None
    assert record.partitions[0].head and record.partitions[0].of_kind("gcs_server")
    assert not record.partitions[1].head
    # Written back as this version, the head partition stays where it was.
    assert parse_record(dumps(record), "host.json") == record


def test_partitions_from_before_shares_take_the_hosts_type() -> None:
    record = load("v4-partition-without-share.json")
    for p in record.partitions:
        assert (p.share, p.labels, p.models, p.out, p.out_core_ids) == (None, (), (), (), ())
        assert p.accelerator_type == record.spec.accelerator_type == "Trainium"
        assert p.health == PartitionState()
    assert record.head_raylet is not None and record.head_raylet.of_kind("gcs_server"), "its head raylet is kept"


def test_a_version_4_record_has_none_of_version_5s_terms() -> None:
    record = load("v4-complete.json")
    assert (record.port_base, record.max_workers, record.resources) == (None, None, ())
    assert record.change is None and record.unassigned == ()


@badinput("traceback")
@pytest.mark.parametrize("version", [VERSION + 1, 99])
def test_a_newer_version_is_refused_naming_it(version: int) -> None:
    data = raw("v4-complete.json")
    data["version"] = version
    with pytest.raises(RecordError, match=f"version: {version}; .*a newer ray-accel wrote it"):
        parse_record(json.dumps(data), "host.json")


def _paths(value: object, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            out += [(*prefix, key), *_paths(item, (*prefix, key))]
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += [(*prefix, i), *_paths(item, (*prefix, i))]
    return out


SHAPES = [(name, path) for name in sorted(APPLIED) for path in _paths(raw(name))]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def _parses_or_refuses(data: object) -> None:
    try:
        record = parse_record(json.dumps(data), "host.json")
    except RecordError as e:
        assert "host.json" in str(e)
    else:
        assert parse_record(dumps(record), "host.json") == record, "what is read is written back the same"


@badinput("traceback")
@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=300)
@given(st.sampled_from(SHAPES), json_values)
def test_an_old_shape_with_any_field_replaced_is_read_or_refused_cleanly(
    shape: tuple[str, tuple[Any, ...]], value: object
) -> None:
    name, path = shape
    data = copy.deepcopy(raw(name))
    target: Any = data
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    _parses_or_refuses(data)


@badinput("traceback")
@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=200)
@given(st.sampled_from(SHAPES))
def test_an_old_shape_with_any_field_removed_is_read_or_refused_cleanly(shape: tuple[str, tuple[Any, ...]]) -> None:
    name, path = shape
    data = copy.deepcopy(raw(name))
    target: Any = data
    for step in path[:-1]:
        target = target[step]
    del target[path[-1]]
    _parses_or_refuses(data)
