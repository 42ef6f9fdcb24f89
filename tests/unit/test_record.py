"""The state record is untrusted input. Every malformed record is a
`RecordError` naming the file; nothing else escapes the parser, whatever the bytes.

Each older shape of the host record is read through its named upgrade.
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
from tests.records import valid_record

SOURCE = "/state/host.json"


def valid_json() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(dumps(valid_record()))
    return data


def parse(data: object) -> HostRecord:
    return parse_record(json.dumps(data), SOURCE)


def refused(data: object | bytes | str, needle: str = "") -> str:
    raw = data if isinstance(data, bytes | str) else json.dumps(data)
    with pytest.raises(RecordError) as info:
        parse_record(raw, SOURCE)
    message = str(info.value)
    assert SOURCE in message, message
    assert needle in message, message
    return message


def test_round_trip() -> None:
    record = valid_record()
    assert parse_record(dumps(record), SOURCE) == record


def test_record_is_frozen() -> None:
    record = valid_record()
    with pytest.raises(AttributeError):
        record.host = "b"  # type: ignore[misc]


# --- The bad-input classes ("Tracebacks": [], {}, missing keys, PIDs of the
# wrong shape or negative, deeply nested JSON; plus NaN and friends).

NOT_A_RECORD = [[], {}, None, 0, 1.5, "x", True, [valid_json()]]


@badinput("traceback")
@pytest.mark.parametrize("data", NOT_A_RECORD, ids=repr)
def test_not_a_record(data: object) -> None:
    refused(data)


TOP_KEYS = [
    "version", "host", "host_ip", "created", "head", "mode", "spec", "ray_args", "gcs_address", "auth", "partitions"
]  # fmt: skip
PART_KEYS = ["partition", "device_ids", "core_ids", "head", "ports", "processes"]
PROC_KEYS = ["kind", "pid", "start_ticks", "identity"]


@badinput("traceback")
@pytest.mark.parametrize("key", TOP_KEYS)
def test_missing_top_key(key: str) -> None:
    data = valid_json()
    del data[key]
    refused(data, key)


@badinput("traceback")
@pytest.mark.parametrize("key", PART_KEYS)
def test_missing_partition_key(key: str) -> None:
    data = valid_json()
    del data["partitions"][1][key]
    refused(data, key)


@badinput("traceback")
@pytest.mark.parametrize("key", PROC_KEYS)
def test_missing_process_key(key: str) -> None:
    data = valid_json()
    del data["head_raylet"]["processes"][1][key]
    refused(data, key)


BAD_PIDS = [-1, 0, -4242, 1 << 22 + 1, 2**64, "4242", 42.0, True, None, [4242], {"pid": 4242}]


@badinput("traceback")
@pytest.mark.parametrize("pid", BAD_PIDS, ids=repr)
def test_bad_pid(pid: object) -> None:
    data = valid_json()
    data["head_raylet"]["processes"][1]["pid"] = pid
    refused(data, "head_raylet.processes[1].pid")


@badinput("traceback")
@pytest.mark.parametrize("ticks", [-1, "1010", 1.5, None, 2**64], ids=repr)
def test_bad_start_ticks(ticks: object) -> None:
    data = valid_json()
    data["head_raylet"]["processes"][1]["start_ticks"] = ticks
    refused(data, "start_ticks")


@badinput("traceback")
@pytest.mark.parametrize(
    "processes",
    [[[4242, 1000]], [[4242, 1000, "raylet"]], {"raylet": [[4242, 1000]]}, "4242", [None], [{}]],
    ids=repr,
)
def test_processes_of_the_wrong_shape(processes: object) -> None:
    data = valid_json()
    data["partitions"][0]["processes"] = processes
    refused(data, "processes")


@badinput("traceback")
@pytest.mark.parametrize("depth", [100, 10_000, 200_000])
def test_deeply_nested_json(depth: int) -> None:
    refused("[" * depth + "]" * depth)
    refused('{"a":' * depth + "1" + "}" * depth)


@badinput("traceback")
@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_nan_and_infinity(constant: str) -> None:
    text = dumps(valid_record()).replace('"created": 1700000000.5', f'"created": {constant}')
    assert constant in text
    refused(text, "")


@badinput("dangerous")
def test_nan_start_ticks_never_matches_anything() -> None:
    text = dumps(valid_record()).replace('"start_ticks": 1010', '"start_ticks": NaN')
    refused(text, "NaN")


@badinput("traceback")
@pytest.mark.parametrize(
    "raw", [b"", b"\xff\xfe", b"{", b'{"version": 3,', b"null", "\ufeff{}".encode(), b"\x00" * 10], ids=repr
)
def test_not_json(raw: bytes) -> None:
    refused(raw)


@badinput("traceback")
def test_older_version_is_refused_with_a_way_out() -> None:
    data = valid_json()
    data["version"] = 2
    message = refused(data, "version")
    assert "remove the file" in message


def test_an_earlier_versions_record_is_read_without_an_ip_and_written_back_as_it_was() -> None:
    data = valid_json()
    del data["host_ip"]
    del data["spec"]["backend"], data["spec"]["traits"]  # version 3's spec named neither
    for key in ("port_base", "max_workers", "resources", "change", "unassigned"):  # nor had it version 5's keys
        del data[key]
    data["version"] = 3
    record = parse(data)
    assert record.legacy and record.host_ip is None and record.host == "host-a"
    assert record.spec.backend == LEGACY_BACKEND
    assert json.loads(dumps(record)) == data, "`stop` marks it stopping in the version that wrote it"
    assert parse_record(dumps(record), SOURCE) == record


@badinput("traceback")
@pytest.mark.parametrize("value", ["host-a", "10.0.0", "", "10.0.0.1:6379", 10, None])
def test_a_host_ip_that_is_no_address_is_refused_naming_it(value: object) -> None:
    data = valid_json()
    data["host_ip"] = value
    refused(data, "host_ip")


def test_the_host_ip_is_kept_canonical() -> None:
    data = valid_json()
    data["host_ip"] = "FD00:0:0::2"
    assert parse(data).host_ip == "fd00::2"


@badinput("state")
def test_empty_partition_list() -> None:
    data = valid_json()
    data["partitions"] = []
    assert parse(data).head_raylet is not None, "a head's record may have every partition gone"
    data["head"] = False
    refused(data, "empty")


@badinput("state")
def test_empty_partition() -> None:
    data = valid_json()
    data["partitions"][1] = {}
    refused(data, "partitions[1]")


@badinput("dangerous")
@pytest.mark.parametrize("name", ["../x", "a/b", "$(id)", "p" * 200, "p\u0430rt", "", ".hidden", "x\n"], ids=repr)
def test_partition_names_that_could_be_paths(name: str) -> None:
    data = valid_json()
    data["partitions"][1]["partition"] = name
    refused(data, "partitions[1].partition")


@badinput("traceback")
@pytest.mark.parametrize(
    ("where", "value", "needle"),
    [
        (("head",), "true", "head"),
        (("mode",), "sideways", "mode"),
        (("gcs_address",), "garbage", "gcs_address"),
        (("gcs_address",), "host:99999", "gcs_address"),
        (("gcs_port",), 0, "gcs_port"),
        (("ray_args",), ["--block"], "ray_args"),
        (("ray_args",), "--temp-dir /x", "ray_args"),
        (("auth",), {"mode": "open"}, "auth"),
        (("auth", "token_path"), "/x\x00y", "auth.token_path"),
        (("spec", "visible_ids_env"), "LD_PRELOAD=/x.so", "visible_ids_env"),
        (("spec", "unit_ids"), [-1], "unit_ids"),
        (("spec", "backend"), "../x", "spec.backend"),
        (("spec", "backend"), None, "spec.backend"),
        (("spec", "traits"), [], "spec.traits"),
        (("spec", "traits", "shareable"), "yes", "traits.shareable"),
        (("spec", "traits", "split"), "sideways", "traits.split"),
        (("partitions", 1, "head"), True, "head partition"),
        (("head_raylet", "partition"), "p0", "head_raylet.partition"),
        (("head_raylet", "core_ids"), [99], "unit 99"),
        (("partitions", 1, "partition"), "p0", "twice"),
        (("partitions", 1, "core_ids"), [15], "core 15"),
        (("partitions", 1, "core_ids"), [99], "unit 99"),
        (("partitions", 1, "core_ids"), [], "empty"),
        (("partitions", 1, "ports", "min_worker_port"), 70000, "min_worker_port"),
        (("partitions", 1, "ports", "max_worker_port"), 21000, "max_worker_port"),
        (("partitions", 1, "ports", "named", "bogus_port"), 30000, "bogus_port"),
        (("partitions", 1, "ports", "named", "node_manager_port"), 80, "node_manager_port"),
        (("partitions", 1, "node_id"), "../../etc", "node_id"),
        (("partitions", 0, "processes", 0, "kind"), "Raylet; rm", "kind"),
        (("partitions", 0, "processes", 0, "identity"), "", "identity"),
        (("partitions", 0, "processes", 0, "identity"), "x\x07", "identity"),
        (("metrics",), "yes", "metrics"),
        (("stopping",), 1, "stopping"),
    ],
)
def test_field_that_does_not_fit(where: tuple[str | int, ...], value: object, needle: str) -> None:
    data = valid_json()
    target: Any = data
    for step in where[:-1]:
        target = target[step]
    target[where[-1]] = value
    refused(data, needle)


# --- Properties: arbitrary JSON, arbitrary bytes, and any one field of a valid
# record replaced by arbitrary JSON, never raise anything but RecordError.

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=30,
)


def _parses_or_refuses(raw: bytes | str) -> None:
    try:
        record = parse_record(raw, SOURCE)
    except RecordError as e:
        assert SOURCE in str(e)
    else:
        assert isinstance(record, HostRecord)
        assert parse_record(dumps(record), SOURCE) == record


@badinput("traceback")
@given(json_values)
def test_arbitrary_json_is_refused_cleanly(value: object) -> None:
    _parses_or_refuses(json.dumps(value))


@badinput("traceback")
@given(st.binary(max_size=200))
def test_arbitrary_bytes_are_refused_cleanly(raw: bytes) -> None:
    _parses_or_refuses(raw)


def _paths(value: object, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


PATHS = _paths(valid_json())


@badinput("traceback")
@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=300)
@given(st.sampled_from(PATHS), json_values)
def test_any_field_replaced_by_anything(path: tuple[Any, ...], value: object) -> None:
    data = copy.deepcopy(valid_json())
    target: Any = data
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    _parses_or_refuses(json.dumps(data))


@badinput("traceback")
@given(st.sampled_from(PATHS))
def test_any_field_removed(path: tuple[Any, ...]) -> None:
    data = copy.deepcopy(valid_json())
    target: Any = data
    for step in path[:-1]:
        target = target[step]
    del target[path[-1]]
    _parses_or_refuses(json.dumps(data))


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


def _all_paths(value: object, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            out += [(*prefix, key), *_all_paths(item, (*prefix, key))]
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += [(*prefix, i), *_all_paths(item, (*prefix, i))]
    return out


SHAPES = [(name, path) for name in sorted(APPLIED) for path in _all_paths(raw(name))]


small_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def _old_shape_parses_or_refuses(data: object) -> None:
    try:
        record = parse_record(json.dumps(data), "host.json")
    except RecordError as e:
        assert "host.json" in str(e)
    else:
        assert parse_record(dumps(record), "host.json") == record, "what is read is written back the same"


@badinput("traceback")
@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=300)
@given(st.sampled_from(SHAPES), small_json_values)
def test_an_old_shape_with_any_field_replaced_is_read_or_refused_cleanly(
    shape: tuple[str, tuple[Any, ...]], value: object
) -> None:
    name, path = shape
    data = copy.deepcopy(raw(name))
    target: Any = data
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    _old_shape_parses_or_refuses(data)


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
    _old_shape_parses_or_refuses(data)
