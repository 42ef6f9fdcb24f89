"""Active checks and repairs: the values (`ray_accel.core.checks`) and the
runner of a check child (`ray_accel.plugins.check_runner`)."""

from __future__ import annotations

import json
import math
import re
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_accel.core.checks import (
    MAX_DETAIL,
    NOT_SUPPORTED,
    RESULT_MARK,
    CheckOutcome,
    CheckResult,
    RepairOutcome,
    RepairResult,
    parse_child_output,
    parse_result_line,
    result_line,
    short,
)
from ray_accel.core.errors import InputError
from ray_accel.core.reader import ReadError, dump, load
from ray_accel.plugins.check_runner import check_timeout, find_device, run_body, run_check_child
from ray_accel.plugins.interface import DevicePlugin
from tests.strategies import hosts

PY = sys.executable


def child(code: str) -> list[str]:
    return [PY, "-c", textwrap.dedent(code)]


def report(outcome: str, detail: str = "") -> str:
    """Python source that prints the result line a check child prints."""
    line = RESULT_MARK + json.dumps({"outcome": outcome, "detail": detail})
    return f"print({line!r})"


# ------------------------------------------------------------------ the values


@given(st.sampled_from(CheckOutcome), st.text(max_size=2 * MAX_DETAIL))
def test_a_result_line_reads_back_as_written(outcome: CheckOutcome, detail: str) -> None:
    got = parse_result_line(result_line(outcome, detail))
    assert got == (outcome, short(detail))
    assert len(got[1]) <= MAX_DETAIL and got[1].isprintable()


@given(st.text(max_size=300))
def test_child_output_is_read_or_refused_with_a_read_error(stdout: str) -> None:
    try:
        outcome, detail = parse_child_output(stdout)
    except ReadError as e:
        assert str(e)
    else:
        assert RESULT_MARK in stdout
        assert isinstance(outcome, CheckOutcome) and len(detail) <= MAX_DETAIL


@given(st.lists(st.text(max_size=40).filter(lambda s: "\n" not in s and "\r" not in s), max_size=5))
def test_the_last_result_line_counts_whatever_else_the_child_prints(noise: list[str]) -> None:
    lines = [*noise, result_line(CheckOutcome.BUSY, "first"), *noise, result_line(CheckOutcome.FAILED, "last")]
    clean = [line for line in lines if not line.startswith(RESULT_MARK) or "last" in line or "first" in line]
    assert parse_child_output("\n".join(clean)) == (CheckOutcome.FAILED, "last")


@pytest.mark.parametrize(
    ("line", "names"),
    [
        (RESULT_MARK + '{"outcome": "fine", "detail": ""}', "outcome"),
        (RESULT_MARK + '{"outcome": "passed"}', "detail"),
        (RESULT_MARK + '{"outcome": "passed", "detail": "", "extra": 1}', "extra"),
        (RESULT_MARK + '{"outcome": "passed", "detail": 3}', "detail"),
        (RESULT_MARK + "not json", "JSON"),
        ("passed", RESULT_MARK.strip()),
    ],
)
def test_a_bad_result_line_is_refused_naming_the_field(line: str, names: str) -> None:
    with pytest.raises(ReadError, match=names):
        parse_result_line(line)


def test_no_result_line_is_refused() -> None:
    with pytest.raises(ReadError, match="reported no result"):
        parse_child_output("warning: something\n")


def test_results_are_frozen_round_trip_and_refuse_time_running_backwards() -> None:
    check = CheckResult("neuron:9", CheckOutcome.FAILED, "mock", 10.0, 12.5)
    repair = RepairResult(
        device_id="GPU-1", outcome=RepairOutcome.REBOOT_REQUIRED, detail="x", action="NODE_REBOOT", started=1, ended=2
    )
    assert load(CheckResult, dump(check)) == check
    assert load(RepairResult, dump(repair)) == repair
    assert dump(repair)["outcome"] == "reboot-required" and dump(repair)["exit_code"] is None  # type: ignore[index]
    with pytest.raises(AttributeError):
        check.outcome = CheckOutcome.PASSED  # type: ignore[misc]
    with pytest.raises(ValueError, match="ends"):
        CheckResult("neuron:9", CheckOutcome.PASSED, "", 5.0, 4.0)


def test_a_backend_without_check_or_repair_says_not_supported() -> None:
    assert DevicePlugin.check(None, "x", 1.0) is NOT_SUPPORTED  # type: ignore[arg-type]
    assert DevicePlugin.repair(None, "x") is NOT_SUPPORTED  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "5", 10**9])
def test_a_bad_time_limit_is_refused_naming_it(bad: object) -> None:
    with pytest.raises(InputError, match=f"check timeout {re.escape(repr(bad))} is"):
        check_timeout(bad)  # type: ignore[arg-type]


@given(hosts())
def test_an_unknown_device_is_refused_naming_it(devices: tuple) -> None:
    assert find_device(devices, devices[-1].id) == devices[-1]
    with pytest.raises(InputError, match="'nothing:0' is not a device of this host"):
        find_device(devices, "nothing:0")


# ------------------------------------------------------------------ the runner


def run(code: str, timeout_s: float = 30.0, **kw: object) -> CheckResult:
    return run_check_child(
        device_id="dev:1", command=child(code), visible_env="FAKE_VISIBLE", visible_value="1", timeout_s=timeout_s, **kw
    )  # type: ignore[arg-type]


def test_the_child_sees_the_one_device_whatever_the_caller_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_VISIBLE", "0,1,2,3")
    code = """
        import json, os
        from ray_accel.core.checks import CheckOutcome, result_line
        print(result_line(CheckOutcome.PASSED, os.environ["FAKE_VISIBLE"] + "|" + os.environ["EXTRA"]))
    """
    result = run(code, extra_env={"EXTRA": "x", "FAKE_VISIBLE": "9"})
    assert (result.outcome, result.detail) == (CheckOutcome.PASSED, "1|x")
    assert result.device_id == "dev:1" and result.started <= result.ended


@pytest.mark.parametrize("outcome", [o.value for o in CheckOutcome])
def test_the_child_reports_each_outcome(outcome: str) -> None:
    result = run(report(outcome, "said so"))
    assert (result.outcome.value, result.detail) == (outcome, "said so")


def test_a_child_that_reports_nothing_failed_with_its_last_words() -> None:
    result = run("import sys; sys.stderr.write('boom: device error\\n'); sys.exit(3)")
    assert result.outcome is CheckOutcome.FAILED
    assert "status 3" in result.detail and "boom: device error" in result.detail


def test_a_child_that_says_passed_but_exits_with_an_error_failed() -> None:
    result = run(report("passed") + "; import sys; sys.exit(1)")
    assert result.outcome is CheckOutcome.FAILED and "said passed but exited with status 1" in result.detail


def test_a_command_that_cannot_start_is_unavailable() -> None:
    result = run_check_child(
        device_id="d", command=["/nonexistent/check"], visible_env="V", visible_value="0", timeout_s=5
    )
    assert result.outcome is CheckOutcome.UNAVAILABLE and "could not start" in result.detail


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


def test_a_check_past_its_limit_times_out_and_its_whole_group_is_killed(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    code = f"""
        import os, subprocess, time
        grandchild = subprocess.Popen(["sleep", "60"])
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{grandchild.pid}}")
        time.sleep(60)
    """
    start = time.monotonic()
    result = run(code, timeout_s=1.5)
    took = time.monotonic() - start
    assert result.outcome is CheckOutcome.TIMEOUT and "no result within 1.5 s" in result.detail
    assert 1.5 <= took < 10 and result.ended - result.started >= 1.5
    own, grandchild = map(int, pids.read_text().split())
    deadline = time.monotonic() + 5
    while not (_gone(own) and _gone(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(own) and _gone(grandchild)


def test_the_child_body_reports_an_exception_as_a_failed_check(capsys: pytest.CaptureFixture[str]) -> None:
    def body() -> tuple[CheckOutcome, str]:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    assert run_body(body) == 0
    outcome, detail = parse_child_output(capsys.readouterr().out)
    assert outcome is CheckOutcome.FAILED and "RuntimeError: CUDA error: an illegal memory access" in detail


def test_the_child_body_reports_its_outcome(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_body(lambda: (CheckOutcome.BUSY, "held by pid 7")) == 0
    assert parse_child_output(capsys.readouterr().out) == (CheckOutcome.BUSY, "held by pid 7")


def test_the_check_child_runs_in_a_session_of_its_own() -> None:
    result = run(
        "import os; "
        + "from ray_accel.core.checks import *; "
        + "print(result_line(CheckOutcome.PASSED, str(os.getsid(0) == os.getpid())))"
    )
    # The child leads a session: its session id is its own PID (setsid(2)).
    assert result.detail == "True"


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 10**6), st.booleans(), st.text()))
def test_a_time_limit_is_taken_exactly_when_it_is_a_number_in_range(value: object) -> None:
    fits = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and 0 < value <= 24 * 3600
    )
    try:
        got = check_timeout(value)  # type: ignore[arg-type]
    except InputError as e:
        assert not fits and repr(value)[:20] in str(e)
    else:
        assert fits and got == float(value)  # type: ignore[arg-type]
