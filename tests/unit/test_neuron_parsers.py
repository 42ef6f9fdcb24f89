"""Property tests for every Neuron parser: neuron-ls JSON, sysfs values,
connected_devices, BDFs, neuron-monitor reports, the core numbering rule and
the merge. Each parser either returns a value that round-trips or raises its
own error naming the value; nothing else escapes."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ray_accel_neuron import arch, cores, limits, merge, monitor, sysfs
from ray_accel_neuron.neuron_ls import NeuronLsError, normalize_bdf, parse_output
from ray_accel_neuron.sysfs import DevNode, Reading, SysfsDevice

from ray_accel.core.devices import validate_inventory
from tests.badinput import badinput
from tests.fakes.neuron_sysfs import TRN1, driver_links

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
NEURON_LS_KEYS = [
    "neuron_device",
    "nc_count",
    "neuroncore_ids",
    "connected_to",
    "bdf",
    "numa_node",
    "memory_size",
    "logical_neuroncore_config",
    "neuron_processes",
    "instance_type",
    "cpu_affinity",
]


# ---------------------------------------------------------------------------
# neuron-ls --json-output
# ---------------------------------------------------------------------------


@badinput("traceback")
@settings(max_examples=300, deadline=None)
@given(json_values)
def test_neuron_ls_parser_raises_only_its_own_error(value: Any) -> None:
    try:
        parse_output(json.dumps(value))
    except NeuronLsError:
        pass


@badinput("traceback")
@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(NEURON_LS_KEYS), json_values, max_size=6), max_size=4))
def test_neuron_ls_parser_on_devices_of_random_fields(entries: list[dict[str, Any]]) -> None:
    try:
        devices = parse_output(json.dumps(entries))
    except NeuronLsError as e:
        assert str(e)  # a reason, naming what
        return
    for d in devices:
        assert 0 <= d.index < limits.MAX_DEVICES and 1 <= d.nc_count <= limits.MAX_LOGICAL_CORES


@st.composite
def ls_devices(draw: st.DrawFn) -> list[dict[str, Any]]:
    indexes = draw(st.lists(st.integers(0, 63), min_size=1, max_size=8, unique=True))
    nc = draw(st.sampled_from([1, 2, 4, 8]))
    out = []
    for i in indexes:
        entry: dict[str, Any] = {
            "neuron_device": i,
            "bdf": draw(st.sampled_from([f"{i:02x}:1e.0", f"0000:{i:02X}:1E.0"])),
            "nc_count": nc,
        }
        if draw(st.booleans()):
            entry["neuroncore_ids"] = list(range(i * nc, i * nc + nc))
        if draw(st.booleans()):
            entry["numa_node"] = draw(st.sampled_from(["-1", "0", "3"]))
        entry["connected_to"] = draw(st.none() | st.lists(st.integers(0, 63), max_size=4, unique=True))
        if draw(st.booleans()):
            entry["logical_neuroncore_config"] = draw(st.sampled_from([1, 2]))
        entry["neuron_processes"] = [
            {"pid": p, "command": "python"} for p in draw(st.lists(st.integers(1, 1 << 22), max_size=3))
        ]
        out.append(entry)
    return out


@settings(max_examples=200, deadline=None)
@given(ls_devices(), st.sampled_from([None, 4]))
def test_well_formed_neuron_ls_output_round_trips(entries: list[dict[str, Any]], indent: int | None) -> None:
    devices = parse_output(json.dumps(entries, indent=indent))
    assert [d.index for d in devices] == sorted(e["neuron_device"] for e in entries)
    by_index = {e["neuron_device"]: e for e in entries}
    for d in devices:
        e = by_index[d.index]
        assert d.nc_count == e["nc_count"]
        assert d.core_ids == (tuple(e["neuroncore_ids"]) if "neuroncore_ids" in e else None)
        assert d.connected == (None if e["connected_to"] is None else tuple(e["connected_to"]))
        assert d.bdf == f"0000:{d.index:02x}:1e.0"
        assert d.numa_node == (int(e["numa_node"]) if "numa_node" in e else None)
        assert [p.pid for p in d.processes] == [p["pid"] for p in e["neuron_processes"]]


@badinput("traceback")
def test_neuron_ls_parser_refuses_deep_nesting_and_duplicates() -> None:
    with pytest.raises(NeuronLsError, match="nested too deeply|invalid JSON"):
        parse_output("[" * 100000 + "]" * 100000)
    twice = [{"neuron_device": 1, "nc_count": 2}, {"neuron_device": 1, "nc_count": 2}]
    with pytest.raises(NeuronLsError, match="lists device 1 twice"):
        parse_output(json.dumps(twice))
    with pytest.raises(NeuronLsError, match="is a dict, not a list"):
        parse_output('{"neuron_devices": []}')


_CANONICAL_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


@badinput("traceback")
@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20))
def test_normalize_bdf_gives_a_canonical_address_or_none(text: str) -> None:
    out = normalize_bdf(text)
    assert out is None or (_CANONICAL_BDF.match(out) and normalize_bdf(out) == out)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 0xFFFF), st.integers(0, 255), st.integers(0, 31), st.integers(0, 7), st.booleans(), st.booleans())
def test_normalize_bdf_accepts_short_and_full_forms(
    domain: int, bus: int, dev: int, fn: int, short: bool, upper: bool
) -> None:
    full = f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"
    text = f"{bus:02x}:{dev:02x}.{fn}" if short else full
    expected = f"0000:{bus:02x}:{dev:02x}.{fn}" if short else full
    assert normalize_bdf(text.upper() if upper else text) == expected


# ---------------------------------------------------------------------------
# sysfs values
# ---------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 63), max_size=8, unique=True))
def test_connected_devices_round_trips_the_driver_format(links: list[int]) -> None:
    # neuron_connected_devices_show: "a, b, c\n", or "\n" when there are none.
    text = ", ".join(map(str, links)) + "\n"
    assert sysfs.parse_connected(text, "x") == tuple(links)


@badinput("unnamed")
@settings(max_examples=500, deadline=None)
@given(st.text(max_size=30))
def test_sysfs_parsers_return_or_name_the_value(text: str) -> None:
    for parse in (sysfs.parse_connected, sysfs.parse_count, sysfs.parse_numa, sysfs.parse_hex, sysfs.parse_u64):
        try:
            parse(text, "the/file")
        except limits.BadData as e:
            assert "the/file" in str(e)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**9 - 1), st.sampled_from(["", "\n", " \n"]))
def test_counts_round_trip(n: int, end: str) -> None:
    assert sysfs.parse_count(f"{n}{end}", "x") == n
    assert sysfs.parse_u64(f"{n}{end}", "x") == n
    assert sysfs.parse_numa(f"{n}{end}", "x") == n
    assert sysfs.parse_hex(f"{n:#x}{end}", "x") == n


@badinput("unnamed")
def test_sysfs_parsers_refuse_lookalikes() -> None:
    for bad in ("٤", "1e8", "-2", "0x10", " ", "12, 3"):
        with pytest.raises(limits.BadData):
            sysfs.parse_count(bad, "x")
    with pytest.raises(limits.BadData, match="listed twice"):
        sysfs.parse_connected("1, 1\n", "x")
    with pytest.raises(limits.BadData, match="outside 0..63"):
        sysfs.parse_connected("1, 64\n", "x")
    assert sysfs.parse_numa("-1\n", "x") == -1
    assert sysfs.parse_serial("\n") is None


# ---------------------------------------------------------------------------
# neuron-monitor reports
# ---------------------------------------------------------------------------


@badinput("traceback")
@settings(max_examples=300, deadline=None)
@given(json_values)
def test_monitor_parser_raises_only_its_own_error(value: Any) -> None:
    try:
        monitor.parse_report(json.dumps(value))
    except monitor.MonitorError:
        pass


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.integers(0, 127), st.floats(0, 100), max_size=8),
    st.dictionaries(st.integers(0, 127), st.integers(0, 1 << 40), max_size=8),
    st.integers(1, 1 << 22),
)
def test_monitor_report_values_come_back(util: dict[int, float], mem: dict[int, int], pid: int) -> None:
    report = {
        "neuron_runtime_data": [
            {
                "pid": pid,
                "error": "",
                "report": {
                    "neuroncore_counters": {
                        "neuroncores_in_use": {str(c): {"neuroncore_utilization": u} for c, u in util.items()}
                    },
                    "memory_used": {
                        "neuron_runtime_used_bytes": {
                            "usage_breakdown": {
                                "neuroncore_memory_usage": {str(c): {"tensors": b} for c, b in mem.items()}
                            }
                        }
                    },
                },
            }
        ]
    }
    parsed = monitor.parse_report(json.dumps(report))
    assert dict(parsed.core_utilization) == util
    assert dict(parsed.core_memory) == mem
    assert dict(parsed.pid_core_memory.get(pid, {})) == mem
    assert parsed.runtime_pids == (pid,) and parsed.problems == ()


# ---------------------------------------------------------------------------
# The numbering rule: both paths agree
# ---------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 63), st.sampled_from([1, 2]), st.booleans())
def test_sysfs_and_neuron_ls_number_trn2_cores_alike(index: int, lnc_size: int, ids_given: bool) -> None:
    lnc = cores.Lnc(lnc_size, "test", explicit=False)
    from_sysfs = cores.number(index, lnc, physical=8)
    per = 8 // lnc_size
    from_ls = cores.number(
        index, lnc, nc_count=per, tool_lnc=lnc_size, given_ids=cores.global_ids(index, per) if ids_given else None
    )
    both = cores.number(index, lnc, physical=8, nc_count=per, tool_lnc=lnc_size)
    assert from_sysfs.ids == from_ls.ids == both.ids == tuple(range(index * per, index * per + per))
    assert from_sysfs.physical == from_ls.physical == 8


@badinput("unnamed")
def test_numbering_refuses_what_does_not_add_up() -> None:
    lnc2 = cores.Lnc(2, "test", explicit=False)
    with pytest.raises(cores.InconsistentCores, match="do not divide"):
        cores.number(0, lnc2, physical=3)
    with pytest.raises(cores.InconsistentCores, match="says 8 physical cores, but neuron-ls nc_count 2"):
        cores.number(0, lnc2, physical=8, nc_count=2, tool_lnc=2)
    lnc, warnings = cores.worker_lnc(arch.TRAINIUM, 2, None, None)
    assert lnc.size == 1 and "ignored" in warnings[0]


# ---------------------------------------------------------------------------
# The merge: any container view of a trn1.32xlarge
# ---------------------------------------------------------------------------


def _reading(path: str, text: str) -> Reading:
    return Reading(path, text)


def _trn1_sysfs(i: int) -> SysfsDevice:
    base = f"/fake/neuron{i}"
    links = ", ".join(map(str, driver_links(TRN1, 16, i))) + "\n"
    return SysfsDevice(
        index=i,
        path=base,
        core_count=_reading(f"{base}/core_count", "2"),
        core_dirs=2,
        connected=_reading(f"{base}/connected_devices", links),
        device_name=_reading(f"{base}/info/architecture/device_name", "Trainium1\n"),
        arch_type=_reading(f"{base}/info/architecture/arch_type", "NDv2\n"),
        serial=_reading(f"{base}/info/serial_number", f"{i:016x}\n"),
    )


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 15), min_size=1))
def test_merge_of_any_container_view_keeps_host_numbering_and_splits_links(mounted: set[int]) -> None:
    src = merge.Sources(
        neuron_root="/fake",
        dev_root="/fake-dev",
        sysfs=tuple(_trn1_sysfs(i) for i in range(16)),
        dev=tuple(DevNode(i, f"/fake-dev/neuron{i}", True) for i in sorted(mounted)),
    )
    inv = merge.merge(src)
    validate_inventory(inv.devices)  # no one-sided or unknown peer, ever
    assert [d.index for d in inv.devices] == sorted(mounted)
    for d in inv.devices:
        links = {f"neuron:{p}" for p in driver_links(TRN1, 16, d.index)}
        assert d.core_ids == (2 * d.index, 2 * d.index + 1)
        assert set(d.peers) == {p for p in links if int(p.split(":")[1]) in mounted}
        assert set(d.external_peers) == links - set(d.peers)
    hidden = any("cannot be opened here" in w for w in inv.warnings)
    assert hidden == (len(mounted) < 16)
