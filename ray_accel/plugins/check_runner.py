"""Run a backend's check of one device in a child process of its own.

The parent side (`run_check_child`): the child sees that one device alone
(the family's visibility variable set to it, whatever the caller's
environment says), runs in a session of its own, and has `timeout_s` to
report; past it, the child's whole process group is killed and the outcome
is `timeout`. A child that exits without a result, or says `passed` and
exits with an error, has `failed`. The child side (`run_body`): the
backend's check body, its outcome printed as the one result line the
parent reads (`ray_accel.core.checks.result_line`); an exception in the
body is a `failed` check naming it.

Why a child: a check that hangs in a driver call cannot be interrupted from
inside its process, and a framework that initialises a device runtime
(CUDA, the Neuron runtime) keeps it for the life of its process; neither
may happen in the decider.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from ray_accel.core.checks import CheckOutcome, CheckResult, parse_child_output, result_line, short
from ray_accel.core.devices import Device
from ray_accel.core.errors import InputError
from ray_accel.core.reader import ReadError

# After the kill, how long the pipes may take to close (a grandchild that
# left the group may hold them): the result does not wait for it longer.
REAP_S = 5.0
MAX_TIMEOUT_S = 24 * 3600.0


def check_timeout(timeout_s: float) -> float:
    """`timeout_s` if it is a usable time limit, else an `InputError` naming it."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not math.isfinite(timeout_s):
        raise InputError(f"check timeout {timeout_s!r} is not a finite number of seconds")
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise InputError(f"check timeout {timeout_s!r} is outside 0 (excluded)..{MAX_TIMEOUT_S:g} seconds")
    return float(timeout_s)


def find_device(devices: Iterable[Device], device_id: str) -> Device:
    """The device `device_id` of this host, or an `InputError` naming it."""
    known = {d.id: d for d in devices}
    if device_id not in known:
        raise InputError(f"{device_id!r} is not a device of this host (known: {', '.join(known) or 'none'})")
    return known[device_id]


def child_command(module: str, *args: str) -> list[str]:
    """The command that runs `module` as a check child with this interpreter."""
    return [sys.executable, "-m", module, *args]


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "nothing on stderr"


def _kill_group(proc: subprocess.Popen[str]) -> None:
    # The child leads its own session (start_new_session), so its group id is
    # its pid: this ends the check and whatever it started, nothing else.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_check_child(
    *,
    device_id: str,
    command: Sequence[str],
    visible_env: str,
    visible_value: str,
    timeout_s: float,
    extra_env: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.time,
) -> CheckResult:
    """Run `command` with only `device_id` visible (`visible_env` set to
    `visible_value`, after `extra_env`) and read its outcome, within
    `timeout_s` seconds."""
    limit = check_timeout(timeout_s)
    env = {**os.environ, **(extra_env or {}), visible_env: visible_value}
    started = clock()
    try:
        proc = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except OSError as e:
        why = f"the check could not start ({command[0]}: {e.strerror or e})"
        return CheckResult(device_id, CheckOutcome.UNAVAILABLE, short(why), started, max(started, clock()))
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        try:
            proc.communicate(timeout=REAP_S)
        except subprocess.TimeoutExpired:
            pass
        why = f"no result within {limit:g} s; the check (pid {proc.pid}) was killed"
        return CheckResult(device_id, CheckOutcome.TIMEOUT, why, started, max(started, clock()))
    ended = max(started, clock())
    try:
        outcome, detail = parse_child_output(out)
    except ReadError as e:
        why = f"the check exited with status {proc.returncode} and {e} ({_last_line(err)})"
        return CheckResult(device_id, CheckOutcome.FAILED, short(why), started, ended)
    if proc.returncode != 0 and outcome is CheckOutcome.PASSED:
        why = f"the check said passed but exited with status {proc.returncode} ({_last_line(err)})"
        return CheckResult(device_id, CheckOutcome.FAILED, short(why), started, ended)
    return CheckResult(device_id, outcome, detail, started, ended)


def run_body(body: Callable[[], tuple[CheckOutcome, str]]) -> int:
    """The child's side: run the check body, print its result line, return
    the exit status (0: a result was reported, whatever it says)."""
    try:
        outcome, detail = body()
    except Exception as e:  # a check that breaks on the device is a failed check, named
        outcome, detail = CheckOutcome.FAILED, f"the check raised {type(e).__name__}: {e}"
    print(result_line(outcome, detail), flush=True)
    return 0
