"""A device's health as frozen values: what a source reported (`HealthEvent`),
one device's verdict after a poll (`DeviceHealth`) and one poll of one
backend (`HealthReport`). Pure; no I/O.

Rules every backend's health rule keeps: UNKNOWN is never healthy and never
a reason to take a device out of scheduling; a poll that cannot read a
device's health leaves it UNKNOWN (or keeps a sticky UNHEALTHY) and does not
count toward its recovery. Each value converts to and from JSON; `from_json`
checks every field and raises `HealthDataError` naming the one that does not
fit (the values cross process boundaries and are read back from files).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass

from ray_accel.core.errors import InputError

MAX_TEXT = 1024
MAX_ITEMS = 4096


class HealthDataError(InputError):
    """Health data that does not fit its schema."""


class Health(enum.Enum):
    """A device's state."""

    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class HealthEvent:
    """Something a source reported about one device."""

    device_id: str  # the Device.id ("neuron:3", a GPU UUID)
    kind: str  # "xid", "ecc", "lost", "components", "unreachable", "returned", "cleared", ...
    code: str | None  # "79" for an XID, "hbm,sram" for components, the counter's name for ECC
    reason: str  # one line a user reads: "XID 79 (GPU has fallen off the bus)"
    at: float  # time.time() of the poll that saw it
    fatal: bool  # True: the device leaves scheduling (under drain or shrink)

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
    def from_json(cls, data: object, where: str = "event") -> HealthEvent:
        obj = _mapping(data, where)
        code = obj.get("code")
        return cls(
            device_id=_text(obj.get("device_id"), f"{where}.device_id"),
            kind=_text(obj.get("kind"), f"{where}.kind"),
            code=None if code is None else _text(code, f"{where}.code"),
            reason=_text(obj.get("reason"), f"{where}.reason"),
            at=_time(obj.get("at"), f"{where}.at"),
            fatal=_bool(obj.get("fatal"), f"{where}.fatal"),
        )


@dataclass(frozen=True)
class DeviceHealth:
    """One device's verdict after a poll."""

    device_id: str
    state: Health
    since: float  # when it entered `state`
    last_event: HealthEvent | None
    # What makes it healthy again, in words ("cleared by hand: ray-accel health
    # clear ...", "present for 3 polls in a row"); "" when healthy.
    healthy_again: str

    def to_json(self) -> dict[str, object]:
        return {
            "device_id": self.device_id,
            "state": self.state.value,
            "since": self.since,
            "last_event": None if self.last_event is None else self.last_event.to_json(),
            "healthy_again": self.healthy_again,
        }

    @classmethod
    def from_json(cls, data: object, where: str = "device") -> DeviceHealth:
        obj = _mapping(data, where)
        state = obj.get("state")
        try:
            health = Health(state)
        except ValueError:
            raise HealthDataError(f"{where}.state: {state!r} is not one of healthy, unhealthy, unknown") from None
        last = obj.get("last_event")
        again = obj.get("healthy_again", "")
        return cls(
            device_id=_text(obj.get("device_id"), f"{where}.device_id"),
            state=health,
            since=_time(obj.get("since"), f"{where}.since"),
            last_event=None if last is None else HealthEvent.from_json(last, f"{where}.last_event"),
            healthy_again="" if again == "" else _text(again, f"{where}.healthy_again"),
        )


@dataclass(frozen=True)
class HealthReport:
    """One poll of one backend."""

    at: float
    devices: tuple[DeviceHealth, ...]  # every device the backend listed at discovery, in index order
    events: tuple[HealthEvent, ...]  # new this poll (fatal and non-fatal)
    errors: tuple[str, ...]  # a source that could not be read, with its cause

    def to_json(self) -> dict[str, object]:
        return {
            "at": self.at,
            "devices": [d.to_json() for d in self.devices],
            "events": [e.to_json() for e in self.events],
            "errors": list(self.errors),
        }

    @classmethod
    def from_json(cls, data: object, where: str = "report") -> HealthReport:
        obj = _mapping(data, where)
        return cls(
            at=_time(obj.get("at"), f"{where}.at"),
            devices=tuple(
                DeviceHealth.from_json(d, f"{where}.devices[{i}]")
                for i, d in enumerate(_list(obj.get("devices"), f"{where}.devices"))
            ),
            events=tuple(
                HealthEvent.from_json(e, f"{where}.events[{i}]")
                for i, e in enumerate(_list(obj.get("events"), f"{where}.events"))
            ),
            errors=tuple(
                _text(e, f"{where}.errors[{i}]") for i, e in enumerate(_list(obj.get("errors"), f"{where}.errors"))
            ),
        )


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _mapping(data: object, where: str) -> Mapping[str, object]:
    if not isinstance(data, dict):
        raise HealthDataError(f"{where}: expected an object, got {_show(data)}")
    return data


def _list(data: object, where: str) -> list[object]:
    if not isinstance(data, list):
        raise HealthDataError(f"{where}: expected a list, got {_show(data)}")
    if len(data) > MAX_ITEMS:
        raise HealthDataError(f"{where}: {len(data)} entries, more than {MAX_ITEMS}")
    return data


def _text(data: object, where: str) -> str:
    if not isinstance(data, str) or not data or len(data) > MAX_TEXT:
        raise HealthDataError(f"{where}: expected 1 to {MAX_TEXT} characters of text, got {_show(data)}")
    if any(ord(c) < 32 or ord(c) == 127 for c in data):
        raise HealthDataError(f"{where}: control character in {_show(data)}")
    return data


def _time(data: object, where: str) -> float:
    if not isinstance(data, int | float) or isinstance(data, bool) or not math.isfinite(data) or data < 0:
        raise HealthDataError(f"{where}: expected a time (seconds since the epoch), got {_show(data)}")
    return float(data)


def _bool(data: object, where: str) -> bool:
    if not isinstance(data, bool):
        raise HealthDataError(f"{where}: expected true or false, got {_show(data)}")
    return data
