"""The state record is untrusted input. Every malformed record is a
`RecordError` naming the file; nothing else escapes the parser, whatever the bytes."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ray_accel_neuron.runtime import TRAITS as NEURON_TRAITS

from ray_accel.bridge.managers import BridgeSpec
from ray_accel.cluster.auth import Auth
from ray_accel.cluster.host import port_blocks
from ray_accel.cluster.record import (
    LEGACY_BACKEND,
    HostRecord,
    PartitionEntry,
    RayProcess,
    RecordError,
    dumps,
    parse_record,
)
from tests.badinput import badinput

SOURCE = "/state/host.json"
SPEC = BridgeSpec(
    resource_name="neuron_cores",
    visible_ids_env="NEURON_RT_VISIBLE_CORES",
    family="neuron",
    accelerator_type="Trainium",
    unit_ids=tuple(range(32)),
    backend="neuron",
    traits=NEURON_TRAITS,
)
RAY = "/venv/lib/python3.11/site-packages/ray"


def valid_record() -> HostRecord:
    blocks = port_blocks(21000, [184, 184, 300], client_server=True)
    head = PartitionEntry(
        name="head",
        device_ids=(),
        core_ids=(),
        head=True,
        ports=blocks[0],
        processes=(
            RayProcess("gcs_server", 4242, 1000, f"{RAY}/core/src/ray/gcs/gcs_server"),
            RayProcess("raylet", 4250, 1010, f"{RAY}/core/src/ray/raylet/raylet"),
            RayProcess("ray_client_server", 4251, 1011, "-m ray.util.client.server"),
        ),
        node_id="ab" * 28,
        node_ip="10.0.0.1",
        log="/state/head.log",
    )
    p0 = PartitionEntry(
        name="p0",
        device_ids=tuple(f"neuron:{i}" for i in range(8)),
        core_ids=tuple(range(16)),
        head=False,
        ports=blocks[1],
        processes=(RayProcess("raylet", 4260, 1020, f"{RAY}/core/src/ray/raylet/raylet"),),
        node_id="cd" * 28,
        node_ip="10.0.0.1",
        log="/state/p0.log",
    )
    worker = PartitionEntry(
        name="p1",
        device_ids=tuple(f"neuron:{i}" for i in range(8, 16)),
        core_ids=tuple(range(16, 32)),
        head=False,
        ports=blocks[2],
        processes=(RayProcess("raylet", 4300, 1100, f"{RAY}/core/src/ray/raylet/raylet"),),
    )
    return HostRecord(
        host="host-a",
        host_ip="10.0.0.1",
        created=1700000000.5,
        head=True,
        mode="auto-split",
        spec=SPEC,
        ray_args=("--temp-dir", "/data/ray"),
        gcs_address="10.0.0.1:6379",
        gcs_port=6379,
        auth=Auth("token", "/home/<user>/.ray/auth_token", "generated"),
        partitions=(p0, worker),
        metrics=True,
        head_raylet=head,
    )


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
