"""Active checks and repairs of one device, as frozen values.

A check proves a device works before work lands on it again: the backend
runs a short workload on that device alone, in a process of its own, under
a time limit (`ray_accel.plugins.check_runner`). A repair is what the
family's driver asks for to make a bad device usable again (a GPU reset).
Both are optional for a backend: one without them answers `NOT_SUPPORTED`.

The check child reports its outcome as one line on its stdout, the
`RESULT_MARK` followed by a JSON object (`{"outcome": ..., "detail": ...}`),
so whatever else the child prints (a framework's warnings) is never taken
for it; `parse_child_output` reads it back.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

from ray_accel.core.health import one_line
from ray_accel.core.reader import Cursor, ReadError, parse_json

DEFAULT_CHECK_TIMEOUT_S = 60.0
MAX_DETAIL = 400  # a detail is one short line: health and top show it beside the device
RESULT_MARK = "RAYACCEL_CHECK_RESULT "
RESULT_KEYS = ("outcome", "detail")


class CheckOutcome(enum.Enum):
    """What a check found."""

    PASSED = "passed"  # the device did the work right: it may take work again
    FAILED = "failed"  # it did not (or the check could not finish on it)
    TIMEOUT = "timeout"  # the check did not end within its time limit; its process was killed
    BUSY = "busy"  # something else holds the device: try again later
    UNAVAILABLE = "unavailable"  # no check can run here (the detail says why); nothing was checked


class RepairOutcome(enum.Enum):
    """What a repair did."""

    OK = "ok"  # repaired, or nothing to repair (the detail says which); check it before use
    FAILED = "failed"  # the repair ran and did not work, or its precondition does not hold yet
    REBOOT_REQUIRED = "reboot-required"  # only a reboot repairs it: nothing was run
    OPERATOR = "operator"  # no repair this backend may run: a person's


class NotSupported(enum.Enum):
    """The answer of a backend that offers no check or no repair."""

    NOT_SUPPORTED = "not supported"


NOT_SUPPORTED = NotSupported.NOT_SUPPORTED


def short(detail: str) -> str:
    """A detail as one line of at most MAX_DETAIL printable characters
    (what a framework printed may hold anything)."""
    printable = "".join(c if c.isprintable() else " " for c in detail)
    return one_line(printable, MAX_DETAIL)


@dataclass(frozen=True)
class CheckResult:
    """One check of one device. Times are wall-clock seconds (`time.time()`),
    so a result kept on disk means the same after a restart."""

    device_id: str
    outcome: CheckOutcome
    detail: str
    started: float
    ended: float

    def __post_init__(self) -> None:
        if self.ended < self.started:
            raise ValueError(f"a check of {self.device_id} ends ({self.ended}) before it starts ({self.started})")


@dataclass(frozen=True, kw_only=True)
class RepairResult:
    """One repair of one device; `action` is what was asked of it (the
    driver's recovery action's name, or the backend's word), `exit_code`
    the exit status of the command run (None: none ran)."""

    device_id: str
    outcome: RepairOutcome
    detail: str
    action: str
    started: float
    ended: float
    exit_code: int | None = None

    def __post_init__(self) -> None:
        if self.ended < self.started:
            raise ValueError(f"a repair of {self.device_id} ends ({self.ended}) before it starts ({self.started})")


def result_line(outcome: CheckOutcome, detail: str) -> str:
    """The line a check child prints to report its outcome."""
    return RESULT_MARK + json.dumps({"outcome": outcome.value, "detail": short(detail)}, ensure_ascii=True)


def parse_result_line(line: str) -> tuple[CheckOutcome, str]:
    """One `result_line` read back; a `ReadError` naming what does not fit."""
    if not line.startswith(RESULT_MARK):
        raise ReadError(f"does not start with {RESULT_MARK.strip()!r}")
    obj = Cursor(parse_json(line[len(RESULT_MARK) :], "the check's result")).only(RESULT_KEYS)
    outcome = obj.at("outcome").enum(CheckOutcome)
    detail = obj.at("detail").text(MAX_DETAIL, empty=True, printable=True)
    return outcome, detail


def parse_child_output(stdout: str) -> tuple[CheckOutcome, str]:
    """The outcome a check child reported: its last line that starts with
    `RESULT_MARK` (a child reports once; a later line would be its last
    word). A `ReadError` where it reported none, or a line that does not fit."""
    marked = [line for line in stdout.splitlines() if line.startswith(RESULT_MARK)]
    if not marked:
        raise ReadError("the check reported no result")
    return parse_result_line(marked[-1])
