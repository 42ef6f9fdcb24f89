"""The mock's active check and repair: the fault file's `checks` and
`repairs` (strict, property-tested against the schema written again here),
the check run as a child that sees one device under a time limit, and the
GPU presets' repair following the CUDA backend's plan, recorded in
`repairs.jsonl` beside the fault file."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray_accel_mock import plugin as mock_plugin
from ray_accel_mock.faults import FAULTS_ENV, REPAIRS_FILE, CheckSpec, FaultFileError, parse_faults, parse_resets
from ray_accel_mock.health import MockHealthMonitor
from ray_accel_mock.plugin import MockPlugin
from ray_accel_mock.spec import load_spec

from ray_accel.core.checks import CheckOutcome, RepairOutcome
from ray_accel.core.errors import InputError
from ray_accel.core.health import Health
from ray_accel.core.health_track import RECOVERY_POLLS_ENV
from tests.badinput import badinput

NEURON_IDS = [f"neuron:{i}" for i in range(16)]
OUTCOMES = ["passed", "failed", "timeout", "busy", "unavailable"]
ACTIONS = [
    "NONE",
    "GPU_RESET",
    "NODE_REBOOT",
    "DRAIN_P2P",
    "DRAIN_AND_RESET",
    "RECOVER_IMEX_DOMAIN",
    "GPU_RESET_BUS",
    "BUS_RESET",
    "SYSTEM_REBOOT",
]


def write(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


# ------------------------------------------------------------------ the schema

CHECK_VALUE = st.one_of(
    st.sampled_from([*OUTCOMES, "PASSED", "ok", "", "pass"]),
    st.none(),
    st.integers(-1, 3),
    st.lists(st.just("passed"), max_size=1),
    st.fixed_dictionaries(
        {},
        optional={
            "outcome": st.sampled_from([*OUTCOMES, "fine", 1]),
            "delay_s": st.one_of(
                st.floats(-1, 4000), st.integers(-1, 4000), st.booleans(), st.just("1"), st.just(math.inf)
            ),
            "detail": st.one_of(st.text(max_size=450), st.integers()),
            "other": st.just(1),
        },
    ),
)


def _check_fits(value: Any) -> bool:
    """Whether the schema takes one `checks` value: its rules written again."""
    if isinstance(value, str):
        return value in OUTCOMES
    if not isinstance(value, dict) or set(value) - {"outcome", "delay_s", "detail"}:
        return False
    if value.get("outcome") not in OUTCOMES:
        return False
    delay = value.get("delay_s", 0)
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not math.isfinite(delay):
        return False
    if not 0 <= delay <= 3600:
        return False
    detail = value.get("detail", "")
    return isinstance(detail, str) and len(detail) <= 400 and detail.isprintable()


@given(st.dictionaries(st.sampled_from(["neuron:1", "neuron:2", "neuron:99"]), CHECK_VALUE, max_size=3))
def test_checks_are_read_exactly_as_the_schema_says(checks: dict[str, Any]) -> None:
    fits = all(d != "neuron:99" and _check_fits(v) for d, v in checks.items())
    try:
        got = parse_faults(json.dumps({"checks": checks}), NEURON_IDS, "neuron", "fault file f.json")
    except FaultFileError as e:
        assert not fits, f"refused a fitting file: {e}"
        # JSON itself refuses an infinite delay; every other refusal names the field.
        assert str(e).startswith(("fault file f.json: checks.", "fault file f.json: not JSON (Infinity"))
        return
    assert fits, "took a file that does not fit"
    for device, value in checks.items():
        spec = got.check_of(device)
        if isinstance(value, str):
            assert spec == CheckSpec(CheckOutcome(value))
        else:
            want = CheckSpec(CheckOutcome(value["outcome"]), float(value.get("delay_s", 0)), value.get("detail", ""))
            assert spec == want
    assert got.check_of("neuron:5") == CheckSpec(), "a device not listed passes at once"


@given(
    st.sampled_from(["gpu", "neuron"]),
    st.dictionaries(st.sampled_from(["G", "neuron:1", "X"]), st.sampled_from(["ok", "failed", "OK", "reset", 1, None])),
)
def test_repairs_are_read_exactly_as_the_schema_says(family: str, repairs: dict[str, Any]) -> None:
    ids = ["G"] if family == "gpu" else NEURON_IDS
    fits = family == "gpu" or not repairs
    fits = fits and all(d in ids and v in ("ok", "failed") for d, v in repairs.items())
    try:
        got = parse_faults(json.dumps({"repairs": repairs}), ids, family)
    except FaultFileError as e:
        assert not fits and "repairs" in str(e)
        return
    assert fits
    assert dict(got.repairs) == {d: RepairOutcome(v) for d, v in repairs.items()}


BAD = [
    ({"checks": {"neuron:1": "fine"}}, "checks.neuron:1: 'fine' is not one of passed, failed, timeout, busy"),
    ({"checks": {"neuron:1": 3}}, "checks.neuron:1: 3 is neither one of passed"),
    ({"checks": {"neuron:1": {"delay_s": 1}}}, "checks.neuron:1.outcome: missing"),
    ({"checks": {"neuron:1": {"outcome": "failed", "delay_s": -1}}}, "checks.neuron:1.delay_s: -1 is outside 0..3600"),
    ({"checks": {"neuron:1": {"outcome": "failed", "delay_s": "5"}}}, "checks.neuron:1.delay_s: '5' is not a number"),
    ({"checks": {"neuron:1": {"outcome": "failed", "wait": 1}}}, "checks.neuron:1.wait: unknown key 'wait'"),
    (
        {"checks": {"neuron:1": {"outcome": "failed", "detail": "a\nb"}}},
        "checks.neuron:1.detail: 'a\\nb' is not one line",
    ),
    ({"checks": {"neuron:77": "passed"}}, "checks.neuron:77: 'neuron:77' is not a device of this mock host"),
    ({"checks": ["neuron:1"]}, "checks: list is not an object"),
    ({"repairs": {"neuron:1": "ok"}}, "repairs: a neuron mock host has no reset to make"),
]


@badinput("traceback")
@pytest.mark.parametrize(("data", "message"), BAD, ids=[b[1].split(":")[0] + str(i) for i, b in enumerate(BAD)])
def test_bad_checks_and_repairs_are_refused_naming_the_field(data: Any, message: str) -> None:
    with pytest.raises(FaultFileError) as e:
        parse_faults(json.dumps(data), NEURON_IDS, "neuron", "fault file f.json")
    assert message in str(e.value), str(e.value)


def test_a_gpu_repair_outcome_other_than_ok_or_failed_is_refused() -> None:
    with pytest.raises(FaultFileError, match="repairs.G: 'reboot' is not one of ok, failed"):
        parse_faults(json.dumps({"repairs": {"G": "reboot"}}), ["G"], "gpu")


@pytest.mark.parametrize("action", ACTIONS)
def test_every_nvidia_recovery_action_is_a_mock_event(tmp_path: Path, action: str) -> None:
    spec = load_spec("p4d.24xlarge")
    gpu = spec.devices[0].id
    faults = tmp_path / "faults.json"
    write(faults, {"events": [{"device": gpu, "kind": "recovery", "code": action}]})
    monitor = MockHealthMonitor(spec, {FAULTS_ENV: str(faults), RECOVERY_POLLS_ENV: "1"})
    device = monitor.poll().devices[0]
    clean = action in ("NONE", "RECOVER_IMEX_DOMAIN")
    assert device.state is (Health.HEALTHY if clean else Health.UNHEALTHY), device
    if not clean:
        assert device.last_event is not None and device.last_event.code == action


# ------------------------------------------------------------------ the check


@pytest.fixture
def neuron_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[MockPlugin, Path]:
    faults = tmp_path / "faults.json"
    monkeypatch.setenv(FAULTS_ENV, str(faults))
    return MockPlugin(load_spec("trn1.32xlarge")), faults


def test_the_check_gives_the_fault_files_outcome_and_passes_a_device_not_listed(
    neuron_host: tuple[MockPlugin, Path],
) -> None:
    plugin, faults = neuron_host
    write(
        faults, {"lost": ["neuron:9"], "checks": {"neuron:9": "failed", "neuron:4": {"outcome": "busy", "detail": "x"}}}
    )
    failed = plugin.check("neuron:9", 30)
    assert (failed.device_id, failed.outcome, failed.detail) == (
        "neuron:9",
        CheckOutcome.FAILED,
        "mock check: failed (fault file)",
    )
    assert (plugin.check("neuron:4", 30).outcome, plugin.check("neuron:4", 30).detail) == (CheckOutcome.BUSY, "x")
    passed = plugin.check("neuron:0", 30)
    assert (passed.outcome, passed.detail) == (CheckOutcome.PASSED, "mock check: passed (not in the fault file)")
    write(faults, {"checks": {"neuron:9": "passed"}})
    assert plugin.check("neuron:9", 30).outcome is CheckOutcome.PASSED, "the file is read at each check"


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_each_outcome_comes_back_from_the_child(neuron_host: tuple[MockPlugin, Path], outcome: str) -> None:
    plugin, faults = neuron_host
    write(faults, {"checks": {"neuron:2": outcome}})
    assert plugin.check("neuron:2", 30).outcome is CheckOutcome(outcome)


def test_the_check_child_sees_the_device_alone(
    neuron_host: tuple[MockPlugin, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin, faults = neuron_host
    write(faults, {"checks": {"neuron:5": "passed"}})
    calls: list[dict[str, Any]] = []
    real = mock_plugin.run_check_child

    def spy(**kw: Any) -> Any:
        calls.append(kw)
        return real(**kw)

    monkeypatch.setattr(mock_plugin, "run_check_child", spy)
    assert plugin.check("neuron:5", 30).outcome is CheckOutcome.PASSED
    device = next(d for d in plugin.list_devices() if d.id == "neuron:5")
    lo, hi = device.core_ids[0], device.core_ids[-1]
    # As the Neuron backend masks it: the runtime reads one index or an inclusive range.
    assert (calls[0]["visible_env"], calls[0]["visible_value"]) == ("NEURON_RT_VISIBLE_CORES", f"{lo}-{hi}")


def test_a_slow_check_is_cut_by_its_limit(neuron_host: tuple[MockPlugin, Path]) -> None:
    plugin, faults = neuron_host
    write(faults, {"checks": {"neuron:9": {"outcome": "passed", "delay_s": 30}}})
    result = plugin.check("neuron:9", 1.0)
    assert result.outcome is CheckOutcome.TIMEOUT and result.ended - result.started < 10
    write(faults, {"checks": {"neuron:9": {"outcome": "passed", "delay_s": 0.2}}})
    assert plugin.check("neuron:9", 30).outcome is CheckOutcome.PASSED


@badinput("traceback")
def test_a_check_with_a_bad_fault_file_or_device_or_limit_is_refused(neuron_host: tuple[MockPlugin, Path]) -> None:
    plugin, faults = neuron_host
    write(faults, {"checks": {"neuron:9": "maybe"}})
    with pytest.raises(FaultFileError, match="checks.neuron:9: 'maybe' is not one of"):
        plugin.check("neuron:9", 30)
    with pytest.raises(InputError, match="'neuron:99' is not a device of this host"):
        plugin.check("neuron:99", 30)
    with pytest.raises(InputError, match="check timeout 0 is outside"):
        plugin.check("neuron:9", 0)


# ------------------------------------------------------------------ the repair


@pytest.fixture
def gpu_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[MockPlugin, Path, str]:
    faults = tmp_path / "faults.json"
    monkeypatch.setenv(FAULTS_ENV, str(faults))
    plugin = MockPlugin(load_spec("p4d.24xlarge"))
    return plugin, faults, plugin.list_devices()[3].id


def recovery(gpu: str, action: str, **rest: Any) -> dict[str, Any]:
    return {"events": [{"device": gpu, "kind": "recovery", "code": action}], **rest}


def repairs(faults: Path) -> list[dict[str, Any]]:
    log = faults.parent / REPAIRS_FILE
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("action", ["GPU_RESET", "DRAIN_AND_RESET"])
def test_a_reset_action_is_reset_once_and_recorded(gpu_host: tuple[MockPlugin, Path, str], action: str) -> None:
    plugin, faults, gpu = gpu_host
    write(faults, recovery(gpu, action))
    result = plugin.repair(gpu)
    assert (result.outcome, result.action, result.exit_code) == (RepairOutcome.OK, action, 0)
    made = repairs(faults)
    assert [(r["device"], r["action"], r["outcome"]) for r in made] == [(gpu, action, "ok")]
    assert result.started <= made[0]["time"] <= result.ended


def test_a_reset_takes_the_outcome_the_fault_file_gives(gpu_host: tuple[MockPlugin, Path, str]) -> None:
    plugin, faults, gpu = gpu_host
    write(faults, recovery(gpu, "GPU_RESET", repairs={gpu: "failed"}))
    result = plugin.repair(gpu)
    assert (result.outcome, result.exit_code) == (RepairOutcome.FAILED, 1)
    assert [r["outcome"] for r in repairs(faults)] == ["failed"]


@pytest.mark.parametrize(
    ("action", "outcome"),
    [
        ("NODE_REBOOT", RepairOutcome.REBOOT_REQUIRED),
        ("SYSTEM_REBOOT", RepairOutcome.REBOOT_REQUIRED),
        ("BUS_RESET", RepairOutcome.REBOOT_REQUIRED),
        ("GPU_RESET_BUS", RepairOutcome.REBOOT_REQUIRED),
        ("NONE", RepairOutcome.OK),
        ("RECOVER_IMEX_DOMAIN", RepairOutcome.OK),
        ("DRAIN_P2P", RepairOutcome.FAILED),
    ],
)
def test_other_actions_run_nothing(gpu_host: tuple[MockPlugin, Path, str], action: str, outcome: RepairOutcome) -> None:
    plugin, faults, gpu = gpu_host
    write(faults, recovery(gpu, action))
    result = plugin.repair(gpu)
    assert (result.outcome, result.action, result.exit_code) == (outcome, action, None)
    assert repairs(faults) == [], "nothing was run, so nothing is recorded"


def test_a_gpu_with_no_action_is_the_operators(gpu_host: tuple[MockPlugin, Path, str]) -> None:
    plugin, faults, gpu = gpu_host
    write(faults, {"lost": [gpu]})
    assert plugin.repair(gpu).outcome is RepairOutcome.OPERATOR and repairs(faults) == []


def test_a_neuron_device_repair_is_the_operators(neuron_host: tuple[MockPlugin, Path]) -> None:
    plugin, faults = neuron_host
    result = plugin.repair("neuron:9")
    assert result.outcome is RepairOutcome.OPERATOR and "AWS publishes no command" in result.detail
    assert repairs(faults) == []


def test_an_ok_reset_clears_the_action_as_the_driver_does(gpu_host: tuple[MockPlugin, Path, str]) -> None:
    plugin, faults, gpu = gpu_host
    write(faults, recovery(gpu, "GPU_RESET"))
    monitor = MockHealthMonitor(plugin.spec, {FAULTS_ENV: str(faults), RECOVERY_POLLS_ENV: "1"})
    by_id = {d.device_id: d for d in monitor.poll().devices}
    assert by_id[gpu].state is Health.UNHEALTHY
    assert plugin.repair(gpu).outcome is RepairOutcome.OK
    monitor.poll()
    by_id = {d.device_id: d for d in monitor.poll().devices}
    assert by_id[gpu].state is Health.HEALTHY, "the reset GPU reads NONE"
    again = plugin.repair(gpu)
    assert (again.outcome, again.action, again.exit_code) == (RepairOutcome.OK, "NONE", None)
    assert len(repairs(faults)) == 1, "nothing left to reset: no second reset"
    (faults.parent / REPAIRS_FILE).unlink()
    by_id = {d.device_id: d for d in monitor.poll().devices}
    assert by_id[gpu].state is Health.UNHEALTHY, "without the record the GPU asks again"


def test_a_failed_reset_leaves_the_action(gpu_host: tuple[MockPlugin, Path, str]) -> None:
    plugin, faults, gpu = gpu_host
    write(faults, recovery(gpu, "DRAIN_AND_RESET", repairs={gpu: "failed"}))
    plugin.repair(gpu)
    second = plugin.repair(gpu)
    assert (second.outcome, second.action) == (RepairOutcome.FAILED, "DRAIN_AND_RESET")
    assert [r["outcome"] for r in repairs(faults)] == ["failed", "failed"]


RESET_LINE = st.fixed_dictionaries(
    {},
    optional={
        "device": st.sampled_from(["G", "H", 3]),
        "time": st.one_of(st.floats(-1, 2e9, allow_nan=False), st.just("now")),
        "action": st.sampled_from([*ACTIONS, "REBOOT"]),
        "outcome": st.sampled_from(["ok", "failed", "maybe"]),
        "extra": st.just(1),
    },
)


def _reset_fits(line: dict[str, Any]) -> bool:
    if set(line) != {"device", "time", "action", "outcome"}:
        return False
    time_ok = isinstance(line["time"], float | int) and line["time"] >= 0
    return line["device"] == "G" and time_ok and line["action"] in ACTIONS and line["outcome"] in ("ok", "failed")


@given(st.lists(RESET_LINE, max_size=4))
def test_repairs_jsonl_is_read_exactly_as_the_mock_writes_it(lines: list[dict[str, Any]]) -> None:
    text = "\n".join(json.dumps(line) for line in lines)
    fits = all(_reset_fits(line) for line in lines)
    try:
        got = parse_resets(text, ["G"], "repairs.jsonl")
    except FaultFileError as e:
        assert not fits and str(e).startswith("repairs.jsonl: line ")
        return
    assert fits
    assert got == {(line["device"], line["action"]) for line in lines if line["outcome"] == "ok"}


@badinput("traceback")
def test_a_bad_repairs_record_fails_the_read_naming_its_line(gpu_host: tuple[MockPlugin, Path, str]) -> None:
    plugin, faults, gpu = gpu_host
    write(faults, recovery(gpu, "GPU_RESET"))
    (faults.parent / REPAIRS_FILE).write_text('{"device": "x"}\n')
    with pytest.raises(FaultFileError, match=r"repairs.jsonl: line 1: device: 'x' is not a device of this mock host"):
        plugin.repair(gpu)


def test_without_a_fault_file_every_check_passes_and_no_gpu_has_an_action(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FAULTS_ENV, raising=False)
    neuron = MockPlugin(load_spec("trn1.2xlarge"))
    assert neuron.check("neuron:0", 30).outcome is CheckOutcome.PASSED
    gpu = MockPlugin(load_spec("p4d.24xlarge"))
    assert gpu.repair(gpu.list_devices()[0].id).outcome is RepairOutcome.OPERATOR
