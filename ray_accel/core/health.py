"""Device health as values: what a source reported, each device's verdict,
one poll of one backend.

These cross process boundaries (the decider writes them into the state
directory's `health.json`; the CLI and the exporters read them back), so
each is written by `reader.dump` and read back by `reader.load`, which reads
its input as untrusted (each value's own checks run as it is made):
anything that does not fit raises `HealthDataError` naming the field
(`devices[2].state: 'sick' is not one of healthy, unhealthy, unknown`).

`Health.UNKNOWN` is never healthy and never a reason to take a device out
of scheduling: a poll that cannot read a device's health leaves it UNKNOWN
(or keeps a state that only a person or K clean polls can end), and such a
poll counts toward nothing. What makes a device healthy again is each
family's rule (in its backend); `DeviceHealth.healthy_again` says it in words.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from ray_accel.core.reader import LINE_BREAKS, Cursor, ReadError, show

# A kind is a short word of the rule's vocabulary ("xid", "ecc", "lost",
# "components", "unreachable", ...); a backend may add its own.
_KIND = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
MAX_ID_CHARS = 256
MAX_CODE_CHARS = 512  # a list of component names fits (the Neuron driver prints at most 511 characters)
MAX_TEXT_CHARS = 4096


def one_line(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """`text` made fit for a reason or an error: one line, at most `limit`
    characters (what a source said may hold anything)."""
    flat = " ".join(text.replace("\x00", " ").splitlines())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


# Health data (read back from JSON, or made) that does not fit; the message names the field.
HealthDataError = ReadError


class Health(enum.Enum):
    """A device's state."""

    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    UNKNOWN = "unknown"


def _line(value: object, where: str, limit: int, empty: bool = False) -> str:
    return Cursor(value, where).text(limit, empty, LINE_BREAKS)


def _check_time(value: float, where: str) -> None:
    """Seconds since the epoch: finite, not negative."""
    Cursor(value, where).number(0.0, message="{value} is not a time (finite, not negative)")


# ---------------------------------------------------------------------------
# The values
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HealthEvent:
    """Something a source reported about one device."""

    device_id: str  # the Device.id ("neuron:3", a GPU UUID)
    kind: str  # "xid", "ecc", "lost", "components", "unreachable", "returned", "cleared", ...
    code: str | None  # "79" for an XID, "hbm,sram" for components, the counter's name for ECC
    reason: str  # one line a user reads: "XID 79 (GPU has fallen off the bus)"
    at: float  # time.time() of the poll that saw it
    fatal: bool  # True: the device leaves scheduling

    def __post_init__(self) -> None:
        _line(self.device_id, "device_id", MAX_ID_CHARS)
        if not _KIND.match(_line(self.kind, "kind", 64)):
            raise ReadError(f"{show(self.kind)} is not a kind (a lower-case word: letters, digits, '_', '-')", "kind")
        if self.code is not None:
            _line(self.code, "code", MAX_CODE_CHARS)
        _line(self.reason, "reason", MAX_TEXT_CHARS)
        _check_time(self.at, "at")
        Cursor(self.fatal, "fatal").bool()

    def same(self, other: HealthEvent | None) -> bool:
        """The same condition (device, kind and code), whenever seen."""
        return other is not None and (self.device_id, self.kind, self.code) == (other.device_id, other.kind, other.code)


@dataclass(frozen=True)
class DeviceHealth:
    """One device's verdict after a poll."""

    device_id: str
    state: Health
    since: float  # when it entered `state`
    last_event: HealthEvent | None
    healthy_again: str  # what makes it healthy again, in words ("" while healthy)
    # Which of its family's sources decided fatal vs not this poll (a kind word:
    # "recovery-action", "xid"); None where the family's rule has one way only.
    source: str | None = None

    def __post_init__(self) -> None:
        _line(self.device_id, "device_id", MAX_ID_CHARS)
        Cursor(self.state, "state").enum(Health)
        if self.source is not None and not _KIND.match(_line(self.source, "source", 64)):
            raise ReadError(f"{show(self.source)} is not a source (a lower-case word)", "source")
        _check_time(self.since, "since")
        if self.last_event is not None and self.last_event.device_id != self.device_id:
            raise ReadError(
                f"{self.last_event.device_id!r} is not the device {self.device_id!r}", "last_event.device_id"
            )
        _line(self.healthy_again, "healthy_again", MAX_TEXT_CHARS, empty=True)


@dataclass(frozen=True)
class HealthReport:
    """One poll of one backend."""

    at: float
    devices: tuple[DeviceHealth, ...]  # every device the backend listed at discovery, in index order
    events: tuple[HealthEvent, ...]  # new this poll (fatal and non-fatal)
    errors: tuple[str, ...]  # a source that could not be read, with its cause

    def __post_init__(self) -> None:
        _check_time(self.at, "at")
        seen: set[str] = set()
        for i, dev in enumerate(self.devices):
            if dev.device_id in seen:
                raise ReadError(f"{dev.device_id!r} is listed twice", f"devices[{i}].device_id")
            seen.add(dev.device_id)
        for i, error in enumerate(self.errors):
            _line(error, f"errors[{i}]", MAX_TEXT_CHARS)
