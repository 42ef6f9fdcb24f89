"""Device health as values: what a source reported, each device's verdict,
one poll of one backend.

These cross process boundaries (the decider writes them into the state
directory's `health.json`; the CLI and the exporters read them back), so
each has `to_json` and a `from_json` that reads its input as untrusted:
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
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ray_accel.core.errors import RayAccelError

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


class HealthDataError(RayAccelError, ValueError):
    """Health data (read back from JSON) that does not fit; the message names the field."""


class Health(enum.Enum):
    """A device's state."""

    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    UNKNOWN = "unknown"


# ---------------------------------------------------------------------------
# Checking JSON field by field
# ---------------------------------------------------------------------------


def _object(data: object, where: str, keys: tuple[str, ...]) -> Mapping[str, Any]:
    """`data` as an object with exactly `keys`."""
    if not isinstance(data, Mapping):
        raise HealthDataError(f"{where or 'health data'}: {type(data).__name__} is not an object")
    for key in data:
        if key not in keys:
            raise HealthDataError(f"{_at(where, str(key))}: unknown field (expected {', '.join(keys)})")
    for key in keys:
        if key not in data:
            raise HealthDataError(f"{_at(where, key)}: missing")
    return data


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _text(value: object, where: str, limit: int, empty: bool = False, line: bool = True) -> str:
    if not isinstance(value, str):
        raise HealthDataError(f"{where}: {value!r} is not a string")
    if not value and not empty:
        raise HealthDataError(f"{where}: empty")
    if len(value) > limit:
        raise HealthDataError(f"{where}: {len(value)} characters, more than {limit}")
    if line and any(c in value for c in "\r\n\x00"):
        raise HealthDataError(f"{where}: {value[:80]!r} is not one line")
    return value


def _time(value: object, where: str) -> float:
    """Seconds since the epoch: a finite, non-negative JSON number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise HealthDataError(f"{where}: {value!r} is not a number")
    out = float(value)
    if not math.isfinite(out) or out < 0:
        raise HealthDataError(f"{where}: {value!r} is not a time (finite, not negative)")
    return out


def _list(value: object, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise HealthDataError(f"{where}: {type(value).__name__} is not a list")
    return value


def _kind(value: object, where: str) -> str:
    kind = _text(value, where, 64)
    if not _KIND.match(kind):
        raise HealthDataError(f"{where}: {kind!r} is not a kind (a lower-case word: letters, digits, '_', '-')")
    return kind


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

    FIELDS = ("device_id", "kind", "code", "reason", "at", "fatal")

    def __post_init__(self) -> None:
        HealthEvent.from_json(self.to_json())  # a value that could not be read back is never made

    def to_json(self) -> dict[str, object]:
        return {
            "device_id": self.device_id,
            "kind": self.kind,
            "code": self.code,
            "reason": self.reason,
            "at": self.at,
            "fatal": self.fatal,
        }

    @classmethod
    def from_json(cls, data: object, where: str = "") -> HealthEvent:
        d = _object(data, where, cls.FIELDS)
        code = d["code"]
        fatal = d["fatal"]
        if not isinstance(fatal, bool):
            raise HealthDataError(f"{_at(where, 'fatal')}: {fatal!r} is not true or false")
        out = object.__new__(cls)
        values = {
            "device_id": _text(d["device_id"], _at(where, "device_id"), MAX_ID_CHARS),
            "kind": _kind(d["kind"], _at(where, "kind")),
            "code": None if code is None else _text(code, _at(where, "code"), MAX_CODE_CHARS),
            "reason": _text(d["reason"], _at(where, "reason"), MAX_TEXT_CHARS),
            "at": _time(d["at"], _at(where, "at")),
            "fatal": fatal,
        }
        for name, value in values.items():
            object.__setattr__(out, name, value)
        return out

    def same(self, other: HealthEvent | None) -> bool:
        """The same condition (device, kind and code), whenever seen."""
        return other is not None and (self.device_id, self.kind, self.code) == (
            other.device_id,
            other.kind,
            other.code,
        )


@dataclass(frozen=True)
class DeviceHealth:
    """One device's verdict after a poll."""

    device_id: str
    state: Health
    since: float  # when it entered `state`
    last_event: HealthEvent | None
    healthy_again: str  # what makes it healthy again, in words ("" while healthy)

    FIELDS = ("device_id", "state", "since", "last_event", "healthy_again")

    def __post_init__(self) -> None:
        DeviceHealth.from_json(self.to_json())

    def to_json(self) -> dict[str, object]:
        return {
            "device_id": self.device_id,
            "state": self.state.value,
            "since": self.since,
            "last_event": None if self.last_event is None else self.last_event.to_json(),
            "healthy_again": self.healthy_again,
        }

    @classmethod
    def from_json(cls, data: object, where: str = "") -> DeviceHealth:
        d = _object(data, where, cls.FIELDS)
        state = d["state"]
        names = [h.value for h in Health]
        if not isinstance(state, str) or state not in names:
            raise HealthDataError(f"{_at(where, 'state')}: {state!r} is not one of {', '.join(names)}")
        device_id = _text(d["device_id"], _at(where, "device_id"), MAX_ID_CHARS)
        last = d["last_event"]
        event = None if last is None else HealthEvent.from_json(last, _at(where, "last_event"))
        if event is not None and event.device_id != device_id:
            raise HealthDataError(
                f"{_at(where, 'last_event.device_id')}: {event.device_id!r} is not the device {device_id!r}"
            )
        out = object.__new__(cls)
        values = {
            "device_id": device_id,
            "state": Health(state),
            "since": _time(d["since"], _at(where, "since")),
            "last_event": event,
            "healthy_again": _text(d["healthy_again"], _at(where, "healthy_again"), MAX_TEXT_CHARS, empty=True),
        }
        for name, value in values.items():
            object.__setattr__(out, name, value)
        return out


@dataclass(frozen=True)
class HealthReport:
    """One poll of one backend."""

    at: float
    devices: tuple[DeviceHealth, ...]  # every device the backend listed at discovery, in index order
    events: tuple[HealthEvent, ...]  # new this poll (fatal and non-fatal)
    errors: tuple[str, ...]  # a source that could not be read, with its cause

    FIELDS = ("at", "devices", "events", "errors")

    def __post_init__(self) -> None:
        HealthReport.from_json(self.to_json())

    def to_json(self) -> dict[str, object]:
        return {
            "at": self.at,
            "devices": [d.to_json() for d in self.devices],
            "events": [e.to_json() for e in self.events],
            "errors": list(self.errors),
        }

    @classmethod
    def from_json(cls, data: object, where: str = "") -> HealthReport:
        d = _object(data, where, cls.FIELDS)
        devices = tuple(
            DeviceHealth.from_json(x, f"{_at(where, 'devices')}[{i}]")
            for i, x in enumerate(_list(d["devices"], _at(where, "devices")))
        )
        seen: set[str] = set()
        for i, dev in enumerate(devices):
            if dev.device_id in seen:
                raise HealthDataError(f"{_at(where, 'devices')}[{i}].device_id: {dev.device_id!r} is listed twice")
            seen.add(dev.device_id)
        events = tuple(
            HealthEvent.from_json(x, f"{_at(where, 'events')}[{i}]")
            for i, x in enumerate(_list(d["events"], _at(where, "events")))
        )
        errors = tuple(
            _text(x, f"{_at(where, 'errors')}[{i}]", MAX_TEXT_CHARS)
            for i, x in enumerate(_list(d["errors"], _at(where, "errors")))
        )
        out = object.__new__(cls)
        for name, value in (("at", _time(d["at"], _at(where, "at"))), ("devices", devices), ("events", events)):
            object.__setattr__(out, name, value)
        object.__setattr__(out, "errors", errors)
        return out

    def device(self, device_id: str) -> DeviceHealth:
        """This poll's verdict on `device_id` (a `KeyError` naming it when the report has none)."""
        for d in self.devices:
            if d.device_id == device_id:
                return d
        raise KeyError(device_id)
