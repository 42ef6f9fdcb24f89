"""The mock's fault file (strict schema, property-tested) and its health
monitor, which applies the real backends' rules: the CUDA rule on GPU
presets, the Neuron rule on Neuron presets. Poll by poll, never timed."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from ray_accel_mock.faults import FAULTS_ENV, FaultEvent, FaultFileError, Faults, load_faults, parse_faults
from ray_accel_mock.health import MockHealthMonitor, current_components
from ray_accel_mock.plugin import MockPlugin
from ray_accel_mock.spec import HostSpec, load_spec
from ray_accel_neuron.sysfs import UnhealthyComponents

from ray_accel.core.health import Health, HealthReport
from ray_accel.core.health_track import RECOVERY_POLLS_ENV
from tests.badinput import badinput

H, U, Q = Health.HEALTHY, Health.UNHEALTHY, Health.UNKNOWN
NEURON_IDS = [f"neuron:{i}" for i in range(16)]


def write(path: Path, data: Any) -> None:
    """As a test should: whole, in one rename."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(data if isinstance(data, str) else json.dumps(data))
    os.replace(tmp, path)


class Host:
    """A mock host, its monitor and its fault file."""

    def __init__(self, tmp: Path, preset: str, k: int = 3, **env: str) -> None:
        self.spec: HostSpec = load_spec(preset)
        self.faults = tmp / "faults.json"
        self.environ = {FAULTS_ENV: str(self.faults), RECOVERY_POLLS_ENV: str(k), **env}
        self.monitor = MockHealthMonitor(self.spec, self.environ)
        self.ids = [d.id for d in sorted(self.spec.devices, key=lambda d: d.index)]

    def set(self, **faults: Any) -> None:
        write(self.faults, faults)

    def poll(self) -> HealthReport:
        return self.monitor.poll()


def states(report: HealthReport) -> list[Health]:
    return [d.state for d in report.devices]


# ---------------------------------------------------------------------------
# Neuron presets: the Neuron rule
# ---------------------------------------------------------------------------


def test_a_neuron_host_with_no_fault_file_is_healthy(tmp_path: Path) -> None:
    host = Host(tmp_path, "trn1.32xlarge")
    report = host.poll()
    assert [d.device_id for d in report.devices] == NEURON_IDS
    assert states(report) == [H] * 16 and report.events == () and report.errors == ()


def test_an_ecc_entry_is_growth_once_and_sticky(tmp_path: Path) -> None:
    host = Host(tmp_path, "trn1.32xlarge")
    ecc = {"device": "neuron:5", "kind": "ecc", "code": "mem_ecc_uncorrected", "count": 2}
    host.set(events=[ecc])
    (event,) = host.poll().events
    assert (event.device_id, event.kind, event.code, event.reason) == (
        "neuron:5",
        "ecc",
        "mem_ecc_uncorrected",
        "mem_ecc_uncorrected grew from 0 to 2",
    )
    for _ in range(4):
        report = host.poll()
        assert report.events == () and report.devices[5].state is U, "taken once; sticky"
    host.set(events=[ecc, {**ecc, "seq": 1}])
    (event,) = host.poll().events
    assert event.reason == "mem_ecc_uncorrected grew from 2 to 4", "a new seq repeats it"
    host.monitor.clear("neuron:5")
    assert host.poll().devices[5].state is H


def test_components_while_listed_then_k_polls_empty(tmp_path: Path) -> None:
    host = Host(tmp_path, "trn3.48xlarge", k=2)
    host.set(events=[{"device": "neuron:7", "kind": "components", "code": "hbm"}])
    report = host.poll()
    assert report.devices[7].state is U and [e.code for e in report.events] == ["hbm"]
    host.set(events=[])
    assert [host.poll().devices[7].state for _ in range(2)] == [U, H]


def test_lost_then_back_for_k_polls(tmp_path: Path) -> None:
    host = Host(tmp_path, "trn1.2xlarge", k=3)
    host.poll()
    host.set(lost=["neuron:0"])
    report = host.poll()
    assert states(report) == [U] and report.events[0].reason == "device gone (lost in the mock fault file)"
    host.faults.unlink()
    assert [host.poll().devices[0].state for _ in range(3)] == [U, U, H]


def test_fail_makes_every_device_unknown_and_keeps_unhealthy_ones(tmp_path: Path) -> None:
    host = Host(tmp_path, "trn1.32xlarge", k=1)
    host.set(events=[{"device": "neuron:1", "kind": "ecc", "code": "sram_ecc_uncorrected"}])
    host.poll()
    host.set(fail=True, lost=["neuron:2"])
    report = host.poll()
    assert states(report) == [Q, U] + [Q] * 14
    assert "mock health source failed (injected)" in report.errors


def test_a_bad_fault_file_is_the_polls_error_naming_it(tmp_path: Path) -> None:
    host = Host(tmp_path, "trn1.32xlarge")
    host.poll()
    host.set(events=[{"device": "neuron:1", "kind": "xid", "code": 79}])
    report = host.poll()
    assert states(report) == [Q] * 16
    assert any("events[0].kind: 'xid' is not one of ecc, components (a neuron mock host)" in e for e in report.errors)


def test_a_device_marked_unhealthy_in_the_spec_stays_unhealthy(tmp_path: Path) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(
        '[node]\nfamily = "neuron"\nmodel = "Trainium"\nmemory_gib = 32\n'
        "[[devices]]\ncores = 2\n[[devices]]\ncores = 2\nhealthy = false\n"
    )
    host = Host(tmp_path, str(spec))
    report = host.poll()
    assert states(report) == [H, U] and report.events[0].reason == "marked unhealthy in the mock spec"
    host.monitor.clear("neuron:1")
    assert host.poll().devices[1].state is U, "the spec still says so"


# ---------------------------------------------------------------------------
# GPU presets: the CUDA rule
# ---------------------------------------------------------------------------


def test_xid_13_only_counts_and_79_is_fatal_on_a_gpu_preset(tmp_path: Path) -> None:
    host = Host(tmp_path, "p4d.24xlarge")
    a, b = host.ids[:2]
    host.set(events=[{"device": a, "kind": "xid", "code": 13}, {"device": b, "kind": "xid", "code": 79, "fatal": None}])
    report = host.poll()
    assert [(e.code, e.fatal) for e in report.events] == [("13", False), ("79", True)]
    assert states(report)[:2] == [H, U]
    assert report.devices[1].last_event is not None
    assert report.devices[1].last_event.reason == "XID 79 (GPU has fallen off the bus)"


def test_fatal_overrides_the_xid_rule_for_one_event(tmp_path: Path) -> None:
    host = Host(tmp_path, "p4d.24xlarge")
    a, b = host.ids[:2]
    host.set(
        events=[
            {"device": a, "kind": "xid", "code": 13, "fatal": True},
            {"device": b, "kind": "xid", "code": 79, "fatal": False},
        ]
    )
    assert states(host.poll())[:2] == [U, H]


def test_the_ignored_list_of_the_host_applies_to_the_mock(tmp_path: Path) -> None:
    host = Host(tmp_path, "p4d.24xlarge", RAYACCEL_CUDA_IGNORED_XIDS="79")
    host.set(events=[{"device": host.ids[0], "kind": "xid", "code": 79}])
    assert host.poll().events[0].fatal is False


def test_gpu_ecc_growth_and_lost(tmp_path: Path) -> None:
    host = Host(tmp_path, "p4d.24xlarge", k=1)
    a, b = host.ids[:2]
    host.set(lost=[b], events=[{"device": a, "kind": "ecc", "code": "volatile_uncorrected", "count": 3}])
    report = host.poll()
    assert [(e.kind, e.reason) for e in report.events] == [
        ("ecc", "uncorrected ECC errors grew from 0 to 3 (volatile count)"),
        ("lost", "GPU lost (lost in the mock fault file)"),
    ]
    host.set(events=[{"device": a, "kind": "ecc", "code": "volatile_uncorrected", "count": 3}])
    assert states(host.poll())[:2] == [U, H]


def test_a_recovery_action_by_name_decides_without_an_xid_and_no_entry_leaves_the_xid_list(tmp_path: Path) -> None:
    host = Host(tmp_path, "p4d.24xlarge", k=2)
    a, b = host.ids[:2]
    host.set(events=[{"device": a, "kind": "recovery", "code": "DRAIN_AND_RESET"}])
    report = host.poll()
    bad, other = report.devices[:2]
    assert (bad.state, bad.source, other.state, other.source) == (U, "recovery-action", H, "xid")
    assert bad.last_event is not None and (bad.last_event.kind, bad.last_event.code) == (
        "recovery-action",
        "DRAIN_AND_RESET",
    )
    assert bad.last_event.reason == "NVML recovery action DRAIN_AND_RESET"
    # An XID on a GPU whose driver gives its action only counts; where none is given, the list decides.
    host.set(
        events=[
            {"device": a, "kind": "recovery", "code": "NONE"},
            {"device": a, "kind": "xid", "code": 79},
            {"device": b, "kind": "xid", "code": 79},
        ]
    )
    report = host.poll()
    assert [(e.device_id, e.fatal) for e in report.events] == [(a, False), (b, True)]
    assert states(report)[:2] == [U, U] and report.devices[1].source == "xid"
    assert host.poll().devices[0].state is H, "NONE for K polls ends the action's fault"
    host.set(events=[{"device": a, "kind": "recovery", "code": "GPU_RESET"}])
    assert host.poll().devices[0].last_event.reason == "NVML recovery action GPU_RESET"  # type: ignore[union-attr]


def test_each_monitor_takes_an_event_once(tmp_path: Path) -> None:
    host = Host(tmp_path, "p4d.24xlarge")
    host.set(events=[{"device": host.ids[0], "kind": "xid", "code": 79}])
    assert len(host.poll().events) == 1 and host.poll().events == ()
    other = MockHealthMonitor(host.spec, host.environ)
    assert len(other.poll().events) == 1, "a new monitor reads the file afresh"


def test_the_plugin_keeps_one_monitor(tmp_path: Path) -> None:
    plugin = MockPlugin(load_spec("trn1.2xlarge"))
    assert plugin.health is plugin.health


# ---------------------------------------------------------------------------
# The fault file's schema
# ---------------------------------------------------------------------------


def parse(data: Any, family: str = "neuron", ids: list[str] | None = None) -> Faults:
    return parse_faults(json.dumps(data), ids or NEURON_IDS, family)


def test_the_schema_as_documented() -> None:
    faults = parse(
        {
            "lost": ["neuron:3"],
            "fail": True,
            "events": [
                {"device": "neuron:5", "kind": "ecc", "code": "mem_ecc_uncorrected", "count": 2},
                {"device": "neuron:7", "kind": "components", "code": "hbm"},
            ],
        }
    )
    assert faults.lost == {"neuron:3"} and faults.fail
    assert [(e.device, e.kind, e.code, e.seq, e.count, e.fatal) for e in faults.events] == [
        ("neuron:5", "ecc", "mem_ecc_uncorrected", 0, 2, None),
        ("neuron:7", "components", "hbm", 0, 1, None),
    ]
    gpu = parse({"events": [{"device": "G", "kind": "xid", "code": 79, "fatal": None, "seq": 1}]}, "gpu", ["G"])
    assert gpu.events[0].key == ("G", "xid", "79", 1)


def test_absent_and_empty_files_are_no_faults(tmp_path: Path) -> None:
    assert load_faults(str(tmp_path / "none.json"), NEURON_IDS, "neuron") == Faults()
    (tmp_path / "empty.json").write_text("")
    assert load_faults(str(tmp_path / "empty.json"), NEURON_IDS, "neuron") == Faults()
    assert load_faults(None, NEURON_IDS, "neuron") == Faults()


def ev(**entry: Any) -> dict[str, Any]:
    """A fault file with this one event."""
    return {"events": [entry]}


N1 = {"device": "neuron:1"}
ECC = {**N1, "kind": "ecc", "code": "mem_ecc_uncorrected"}
XID = {"device": "G", "kind": "xid", "code": 1}
RECOVER = {"device": "G", "kind": "recovery", "code": "DRAIN_AND_RESET"}
BAD: list[tuple[str, Any, str, str]] = [
    ("not json", "{", "neuron", "not JSON"),
    ("not an object", [], "neuron", "list is not an object"),
    ("unknown top key", {"lsot": []}, "neuron", "lsot: unknown key"),
    ("lost not a list", {"lost": "neuron:3"}, "neuron", "lost: 'neuron:3' is not a list"),
    ("lost unknown device", {"lost": ["neuron:99"]}, "neuron", "lost[0]: 'neuron:99' is not a device of this mock"),
    ("lost twice", {"lost": ["neuron:1", "neuron:1"]}, "neuron", "lost[1]: 'neuron:1' is listed twice"),
    ("fail not a bool", {"fail": 1}, "neuron", "fail: 1 is not true or false"),
    ("events not a list", {"events": {}}, "neuron", "events: {} is not a list"),
    ("event unknown key", ev(**ECC, colour=1), "neuron", "events[0].colour: unknown key"),
    ("event no code", ev(**N1, kind="ecc"), "neuron", "events[0].code: missing"),
    ("xid on neuron", ev(**N1, kind="xid", code=79), "neuron", "events[0].kind: 'xid' is not one of ecc, components"),
    (
        "components on gpu",
        ev(device="G", kind="components", code="hbm"),
        "gpu",
        "'components' is not one of xid, ecc, recovery",
    ),
    ("xid as text", ev(**{**XID, "code": "79"}), "gpu", "events[0].code: '79' is not an integer"),
    ("xid negative", ev(**{**XID, "code": -1}), "gpu", "events[0].code: -1 is outside"),
    ("xid boolean", ev(**{**XID, "code": True}), "gpu", "events[0].code: True is not an integer"),
    ("bad ecc counter", ev(**{**ECC, "code": "mem_ecc_corrected"}), "neuron", "'mem_ecc_corrected' is not one of"),
    ("bad components", ev(**N1, kind="components", code="HBM!"), "neuron", "'HBM!' is not a component name"),
    ("empty components", ev(**N1, kind="components", code=""), "neuron", "events[0].code: empty"),
    ("spaced components", ev(**N1, kind="components", code=" hbm"), "neuron", "' hbm' has spaces around it"),
    ("fatal on ecc", ev(**ECC, fatal=False), "neuron", "fatal: False: only an xid's rule can be overridden"),
    ("fatal not a bool", ev(**XID, fatal="yes"), "gpu", "events[0].fatal: 'yes' is not true, false or null"),
    ("count on xid", ev(**XID, count=2), "gpu", "events[0].count: only ecc events have a count"),
    ("count zero", ev(**ECC, count=0), "neuron", "events[0].count: 0 is outside 1.."),
    ("seq float", ev(**XID, seq=1.5), "gpu", "events[0].seq: 1.5 is not an integer"),
    ("unknown device", ev(**{**ECC, "device": "neuron:16"}), "neuron", "'neuron:16' is not a device of this mock"),
    ("same event twice", {"events": [XID, XID]}, "gpu", "events[1]: (G, xid, 1, seq 0) is listed twice"),
    ("recovery by number", ev(**{**RECOVER, "code": 4}), "gpu", "events[0].code: 4 is not one of NONE, GPU_RESET"),
    ("unknown recovery", ev(**{**RECOVER, "code": "REBOOT"}), "gpu", "'REBOOT' is not one of NONE, GPU_RESET"),
    ("recovery twice", {"events": [RECOVER, {**RECOVER, "code": "NONE"}]}, "gpu", "G has a recovery action already"),
    ("recovery on neuron", ev(**N1, kind="recovery", code="NONE"), "neuron", "'recovery' is not one of ecc"),
    ("fatal on recovery", ev(**RECOVER, fatal=True), "gpu", "only an xid's rule can be overridden"),
    ("duplicate key", '{"fail": true, "fail": false}', "neuron", "key 'fail' appears twice"),
]


@badinput("traceback")
@pytest.mark.parametrize(("case", "data", "family", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_fault_files_are_refused_naming_what(case: str, data: Any, family: str, message: str) -> None:
    text = data if isinstance(data, str) else json.dumps(data)
    ids = ["G"] if family == "gpu" else NEURON_IDS
    with pytest.raises(FaultFileError) as e:
        parse_faults(text, ids, family, "fault file f.json")
    assert message in str(e.value) and str(e.value).startswith("fault file f.json")


@badinput("traceback")
def test_a_bad_fault_file_fails_the_samples_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f.json"
    write(path, {"lost": ["neuron:77"]})
    monkeypatch.setenv(FAULTS_ENV, str(path))
    telemetry = MockPlugin(load_spec("trn1.32xlarge")).telemetry
    with pytest.raises(FaultFileError, match="'neuron:77' is not a device of this mock host"):
        telemetry.device_samples()


# Entries a fault file may hold, good or not, to be checked against the schema's own rule.
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2**33),
    st.sampled_from(
        ["neuron:1", "neuron:99", "G", "ecc", "xid", "components", "hbm", "hbm,sram", "device_unreachable"]
    ),
    st.sampled_from(["mem_ecc_uncorrected", "volatile_uncorrected", "", "Bad Name", "79", " hbm", "a,a", "x,"]),
    st.floats(allow_nan=False, allow_infinity=False),
)
EVENT_KEYS = st.sampled_from(["device", "kind", "code", "seq", "count", "fatal", "other"])


def _expected(data: dict[str, Any], family: str, ids: list[str]) -> bool:
    """Whether the schema accepts `data`: its rules, written again independently."""
    ecc_files = ["mem_ecc_uncorrected", "sram_ecc_uncorrected", "mem_ecc_repairable_uncorrected"]
    actions = ["NONE", "GPU_RESET", "NODE_REBOOT", "DRAIN_P2P", "DRAIN_AND_RESET"]
    actions += ["RECOVER_IMEX_DOMAIN", "GPU_RESET_BUS", "BUS_RESET", "SYSTEM_REBOOT"]
    by_family: dict[str, dict[str, Any]] = {
        "gpu": {"xid": None, "ecc": ["volatile_uncorrected"], "recovery": actions},
        "neuron": {"ecc": ecc_files, "components": "components"},
    }
    kinds = by_family[family]
    keys: list[tuple[str, str, str, int]] = []
    acting: list[str] = []  # GPUs with a recovery action
    for e in data["events"]:
        if set(e) - {"device", "kind", "code", "seq", "count", "fatal"} or not {"device", "kind", "code"} <= set(e):
            return False
        if e["kind"] not in kinds or not isinstance(e["kind"], str) or e["device"] not in ids:
            return False
        if not isinstance(e["device"], str):
            return False
        code, allowed = e["code"], kinds[e["kind"]]
        if e["kind"] == "xid":
            if type(code) is not int or not 0 <= code < 2**64:
                return False
        elif allowed == "components":
            names = code.split(",") if isinstance(code, str) else []
            if not isinstance(code, str) or not code or code != code.strip():
                return False
            if code != "device_unreachable" and (
                len(set(names)) != len(names)
                or not all(re.fullmatch(r"[a-z0-9_]{1,64}", n) for n in names)
                or "device_unreachable" in names
            ):
                return False
        elif code not in allowed:
            return False
        fatal = e.get("fatal")
        if fatal is not None and (not isinstance(fatal, bool) or e["kind"] != "xid"):
            return False
        if "count" in e and e["kind"] != "ecc":
            return False
        for name, lo in (("seq", 0), ("count", 1)):
            if name in e and (type(e[name]) is not int or not lo <= e[name] <= 2**32 - 1):
                return False
        key = (e["device"], e["kind"], str(code), e.get("seq", 0))
        if e["kind"] == "recovery":
            if e["device"] in acting:
                return False
            acting.append(e["device"])
        elif e["kind"] != "components":
            if key in keys:
                return False
            keys.append(key)
    return True


@st.composite
def fault_events(draw: st.DrawFn, family: str) -> dict[str, Any]:
    """An entry of the schema, then perhaps one of its keys changed, dropped or added."""
    if family == "gpu":
        kind = draw(st.sampled_from(["xid", "ecc", "recovery"]))
        e: dict[str, Any] = {"device": "G", "kind": kind}
        codes = {"ecc": st.just("volatile_uncorrected"), "recovery": st.sampled_from(["NONE", "DRAIN_AND_RESET"])}
        e["code"] = draw(codes.get(kind, st.integers(0, 200)))
        if kind == "xid" and draw(st.booleans()):
            e["fatal"] = draw(st.sampled_from([None, True, False]))
    else:
        kind = draw(st.sampled_from(["ecc", "components"]))
        e = {"device": draw(st.sampled_from(NEURON_IDS[:3])), "kind": kind}
        if kind == "ecc":
            e["code"] = draw(st.sampled_from(["mem_ecc_uncorrected", "sram_ecc_uncorrected"]))
        else:
            e["code"] = draw(st.sampled_from(["hbm", "hbm,sram", "device_unreachable", "link_efa,new_part"]))
    if kind == "ecc" and draw(st.booleans()):
        e["count"] = draw(st.integers(1, 5))
    if draw(st.booleans()):
        e["seq"] = draw(st.integers(0, 3))
    how = draw(st.sampled_from(["keep", "keep", "change", "drop", "add"]))
    key = draw(EVENT_KEYS)
    if how == "change":
        e[key] = draw(VALUES)
    elif how == "drop":
        e.pop(key, None)
    elif how == "add":
        e.setdefault(key, draw(VALUES))
    return e


@badinput("traceback")
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from(["gpu", "neuron"]))
def test_the_parser_accepts_exactly_what_the_schema_says(data: st.DataObject, family: str) -> None:
    ids = ["G"] if family == "gpu" else NEURON_IDS
    events = data.draw(st.lists(fault_events(family), max_size=3))
    doc = {"events": events}
    try:
        want = _expected(doc, family, ids)
    except (TypeError, AttributeError):
        want = False
    event("accepted" if want else "refused")
    if want:
        faults = parse_faults(json.dumps(doc), ids, family)
        assert len(faults.events) == len(events)
    else:
        with pytest.raises(FaultFileError) as e:
            parse_faults(json.dumps(doc), ids, family, "fault file x")
        assert str(e.value).startswith("fault file x")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_are_faults_or_a_named_error(raw: bytes) -> None:
    try:
        parse_faults(raw.decode("utf-8", "replace"), NEURON_IDS, "neuron", "fault file y")
    except FaultFileError as e:
        assert str(e).startswith("fault file y")


@badinput("unnamed")
def test_a_huge_or_many_lined_value_is_cut_short_and_the_poll_still_reports(tmp_path: Path) -> None:
    host = Host(tmp_path, "trn1.2xlarge")
    host.set(lost=["x\n" * 100_000])
    report = host.poll()
    assert states(report) == [Q]
    errors = [e for e in report.errors if "lost[0]" in e]
    assert errors and all("\n" not in e and len(e) <= 1024 and "..." in e for e in errors)


# A fault file bad from the start, a failed source on a GPU preset, a GPU
# preset's kept faults across deciders, and a Neuron device the driver cannot
# reach.
ECC_COMPONENT = "mem_ecc_uncorrected"


def test_an_unreachable_device_reads_as_unreachable_unless_components_are_named() -> None:
    unreachable = FaultEvent("neuron:1", "components", " device_unreachable ")
    named = FaultEvent("neuron:1", "components", "hbm,sram")
    other = FaultEvent("neuron:2", "components", "nc0")
    assert current_components((unreachable, other), "neuron:1") == UnhealthyComponents((), True)
    assert current_components((unreachable, named, named), "neuron:1") == UnhealthyComponents(("hbm", "sram"))
    assert current_components((other,), "neuron:1").healthy


def test_a_fault_file_bad_when_the_monitor_starts_gives_no_counter_baseline(tmp_path: Path) -> None:
    faults = tmp_path / "faults.json"
    faults.write_text("{not json")
    host = Host(tmp_path, "trn1.32xlarge", k=1)
    assert states(host.poll()) == [Q] * 16
    host.set(counters={"neuron:3": {ECC_COMPONENT: 2}})
    report = host.poll()
    assert report.devices[3].state is U and report.events[0].reason == f"{ECC_COMPONENT} grew from 0 to 2"


def test_a_failed_or_unreadable_source_on_a_gpu_preset_makes_every_gpu_unknown(tmp_path: Path) -> None:
    host = Host(tmp_path, "p4d.24xlarge")
    host.set(fail=True)
    report = host.poll()
    assert states(report) == [Q] * 8
    assert f"{host.ids[0]}: presence: mock health source failed (injected)" in report.errors
    host.faults.write_text("[]")
    report = host.poll()
    assert states(report) == [Q] * 8 and any(str(host.faults) in e for e in report.errors)


def test_a_gpu_presets_sticky_fault_is_kept_for_the_next_monitor_and_cleared_by_hand(tmp_path: Path) -> None:
    host = Host(tmp_path, "p4d.24xlarge")
    gpu = host.ids[2]
    host.set(events=[{"device": gpu, "kind": "xid", "code": 79}])
    assert host.poll().devices[2].state is U
    kept = host.monitor.kept()
    assert [k.device_id for k in kept if k.faults] == [gpu]
    host.set()
    later = MockHealthMonitor(host.spec, host.environ)
    later.resume(kept)
    assert later.poll().devices[2].state is U, "an XID 79 stays until cleared, across deciders"
    later.clear(gpu)
    assert later.poll().devices[2].state is H


# The fault file where it is no file, or for a family the mock has no fault
# kinds for.
IDS = ["neuron:0"]


def test_a_fault_file_for_a_family_without_kinds_is_refused_naming_it() -> None:
    with pytest.raises(FaultFileError, match="^fault file: no fault kinds for family 'tpu'$"):
        parse_faults("{}", IDS, "tpu")


def test_a_fault_file_that_is_a_directory_is_refused_naming_its_path(tmp_path: Path) -> None:
    with pytest.raises(FaultFileError, match=f"fault file {tmp_path}"):
        load_faults(str(tmp_path), IDS, "neuron")
