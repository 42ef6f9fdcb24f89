"""What a host's health decider knows, as frozen values, and `health.json`,
the file it writes after every poll (read by `ray-accel health`, `status`,
`top`, `jobs` and the metrics exporters).

The file is input like the host record: `parse_health` checks every field
and raises `HealthFileError` naming the file and the field; nothing else
escapes it, whatever the bytes. Pure, apart from `read_health` (one bounded
read of a regular file).
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from ray_accel.core import validate
from ray_accel.core.errors import InputError
from ray_accel.core.files import UnreadableFile, read_bytes
from ray_accel.core.health import DeviceHealth, HealthDataError, HealthEvent

VERSION = 1
HEALTH_FILE = "health.json"
MAX_BYTES = 8 * 1024 * 1024
MAX_EVENTS = 100  # the file keeps the last ones, newest last
MAX_ITEMS = 4096
MAX_TEXT = 4096
MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 3600.0
MAX_DEADLINE_S = 7 * 24 * 3600.0


class HealthFileError(InputError):
    """`health.json` does not fit its schema."""


class Action(enum.Enum):
    """What the decider does when a device of a partition turns unhealthy
    (`ray-accel start --on-unhealthy`)."""

    REPORT = "report"  # say so (health, status, top, metrics); scheduling is left as it is
    DRAIN = "drain"  # drain the partition through Ray; stop its raylet at the deadline
    SHRINK = "shrink"  # drain, then restart the partition without the device


class PartState(enum.Enum):
    """A partition as the decider sees it."""

    SERVING = "serving"  # every device it was planned with
    DRAINING = "draining"  # drained through Ray: takes no new work; stopped at the deadline
    SHRUNK = "shrunk"  # serving without its unhealthy devices
    RESTORING = "restoring"  # drained again, to be restarted with devices that are healthy again
    STOPPED = "stopped"  # its raylet stopped by the decider; nothing of it serves


@dataclass(frozen=True)
class HealthSettings:
    """The choices `start` made for the host's decider (kept in the host record)."""

    action: Action = Action.REPORT
    interval_s: float = 5.0
    drain_deadline_s: float = 120.0

    def to_json(self) -> dict[str, object]:
        return {"action": self.action.value, "interval_s": self.interval_s, "drain_deadline_s": self.drain_deadline_s}

    @classmethod
    def from_json(cls, data: object, where: str = "health") -> HealthSettings:
        obj = _mapping(data, where)
        _only(obj, {"action", "interval_s", "drain_deadline_s"}, where)
        return cls(
            action=_enum(Action, obj.get("action"), f"{where}.action"),
            interval_s=_number(obj.get("interval_s"), f"{where}.interval_s", MIN_INTERVAL_S, MAX_INTERVAL_S),
            drain_deadline_s=_number(obj.get("drain_deadline_s"), f"{where}.drain_deadline_s", 0.0, MAX_DEADLINE_S),
        )


@dataclass(frozen=True)
class PartitionHealth:
    """One partition of the host, as the decider left it after a poll."""

    partition: str
    state: PartState
    since: float  # when it entered `state`
    devices: tuple[str, ...]  # the devices it serves now (none while stopped)
    out: tuple[str, ...]  # its devices out of service (or to be taken out by the drain under way)
    node_id: str | None  # its raylet's Ray node id
    detail: str  # one line a user reads: why it is in this state, what comes next
    deadline: float | None = None  # a drain's: when the decider stops the raylet
    target: tuple[str, ...] | None = None  # a drain's: the devices it serves once restarted
    head: bool = False

    def to_json(self) -> dict[str, object]:
        return {
            "partition": self.partition,
            "state": self.state.value,
            "since": self.since,
            "devices": list(self.devices),
            "out": list(self.out),
            "node_id": self.node_id,
            "detail": self.detail,
            "deadline": self.deadline,
            "target": None if self.target is None else list(self.target),
            "head": self.head,
        }

    @classmethod
    def from_json(cls, data: object, where: str) -> PartitionHealth:
        obj = _mapping(data, where)
        _only(obj, {f.name for f in PARTITION_FIELDS}, where)
        name = _text(obj.get("partition"), f"{where}.partition")
        try:
            validate.partition_name(name)
        except InputError as e:
            raise HealthFileError(f"{where}.partition: {e}") from None
        node_id = obj.get("node_id")
        deadline = obj.get("deadline")
        target = obj.get("target")
        return cls(
            partition=name,
            state=_enum(PartState, obj.get("state"), f"{where}.state"),
            since=_time(obj.get("since"), f"{where}.since"),
            devices=_texts(obj.get("devices"), f"{where}.devices"),
            out=_texts(obj.get("out"), f"{where}.out"),
            node_id=None if node_id is None else _text(node_id, f"{where}.node_id"),
            detail=_text(obj.get("detail"), f"{where}.detail", empty=True),
            deadline=None if deadline is None else _time(deadline, f"{where}.deadline"),
            target=None if target is None else _texts(target, f"{where}.target"),
            head=_bool(obj.get("head", False), f"{where}.head"),
        )


PARTITION_FIELDS = tuple(PartitionHealth.__dataclass_fields__.values())


@dataclass(frozen=True)
class HostHealth:
    """`health.json`: the host's devices and partitions after the last poll."""

    at: float
    settings: HealthSettings
    devices: tuple[DeviceHealth, ...]
    partitions: tuple[PartitionHealth, ...]
    events: tuple[HealthEvent, ...] = ()  # the last MAX_EVENTS, newest last
    counters: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # device -> "kind:code" -> events
    polls: int = 0  # polls made by this decider: tests count by it, never by time
    errors: tuple[str, ...] = ()  # what the last poll could not read

    def device(self, device_id: str) -> DeviceHealth | None:
        return next((d for d in self.devices if d.device_id == device_id), None)

    def partition(self, name: str) -> PartitionHealth | None:
        return next((p for p in self.partitions if p.partition == name), None)

    def with_partition(self, part: PartitionHealth) -> HostHealth:
        return replace(self, partitions=tuple(part if p.partition == part.partition else p for p in self.partitions))

    def to_json(self) -> dict[str, object]:
        return {
            "version": VERSION,
            "at": self.at,
            "action": self.settings.action.value,
            "interval_s": self.settings.interval_s,
            "drain_deadline_s": self.settings.drain_deadline_s,
            "polls": self.polls,
            "devices": [d.to_json() for d in self.devices],
            "events": [e.to_json() for e in self.events[-MAX_EVENTS:]],
            "partitions": [p.to_json() for p in self.partitions],
            "counters": {d: dict(c) for d, c in self.counters.items()},
            "errors": list(self.errors),
        }


def event_key(event: HealthEvent) -> str:
    """A counter's key: `kind:code` (`xid:13`), or the kind alone."""
    return f"{event.kind}:{event.code}" if event.code is not None else event.kind


def count_events(counters: Mapping[str, Mapping[str, int]], events: Sequence[HealthEvent]) -> dict[str, dict[str, int]]:
    """`counters` with `events` added, one per event."""
    out = {d: dict(c) for d, c in counters.items()}
    for e in events:
        row = out.setdefault(e.device_id, {})
        row[event_key(e)] = row.get(event_key(e), 0) + 1
    return out


def dumps(health: HostHealth) -> str:
    return json.dumps(health.to_json(), indent=1, allow_nan=False)


def parse_health(raw: bytes | str, source: str) -> HostHealth:
    """The health state in `raw` (the bytes of `source`), or `HealthFileError`
    naming `source` and what does not fit."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        data = json.loads(text, parse_constant=_no_constant)
    except UnicodeDecodeError as e:
        raise HealthFileError(f"health file {source} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except RecursionError:
        raise HealthFileError(f"health file {source} is not valid JSON: nested too deeply") from None
    except ValueError as e:
        raise HealthFileError(f"health file {source} is not valid JSON: {e}") from None
    try:
        return _health(data)
    except (HealthFileError, HealthDataError) as e:
        raise HealthFileError(f"health file {source} does not fit: {e}") from None
    except RecursionError:
        raise HealthFileError(f"health file {source} does not fit: nested too deeply") from None


def read_health(directory: Path) -> HostHealth | None:
    """`<directory>/health.json`, None where there is none yet, or
    `HealthFileError` naming it when it cannot be used."""
    path = directory / HEALTH_FILE
    try:
        raw = read_bytes(path, MAX_BYTES, follow=False)
    except FileNotFoundError:
        return None
    except (UnreadableFile, OSError) as e:
        raise HealthFileError(f"health file {path}: {e}") from None
    return parse_health(raw, str(path))


def _health(data: object) -> HostHealth:
    obj = _mapping(data, "")
    _only(
        obj,
        {
            "version",
            "at",
            "action",
            "interval_s",
            "drain_deadline_s",
            "polls",
            "devices",
            "events",
            "partitions",
            "counters",
            "errors",
        },
        "",
    )
    version = obj.get("version")
    if version != VERSION or isinstance(version, bool):
        raise HealthFileError(f"version: {version!r}; this ray-accel reads version {VERSION}")
    settings = HealthSettings.from_json(
        {k: obj.get(k) for k in ("action", "interval_s", "drain_deadline_s")}, "settings"
    )
    devices = tuple(
        DeviceHealth.from_json(d, f"devices[{i}]") for i, d in enumerate(_list(obj.get("devices"), "devices"))
    )
    ids = [d.device_id for d in devices]
    dup = next((d for d in ids if ids.count(d) > 1), None)
    if dup is not None:
        raise HealthFileError(f"devices: {dup!r} appears twice")
    parts = tuple(
        PartitionHealth.from_json(p, f"partitions[{i}]")
        for i, p in enumerate(_list(obj.get("partitions"), "partitions"))
    )
    names = [p.partition for p in parts]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise HealthFileError(f"partitions: {dup!r} appears twice")
    events = tuple(
        HealthEvent.from_json(e, f"events[{i}]") for i, e in enumerate(_list(obj.get("events", []), "events"))
    )
    counters_raw = _mapping(obj.get("counters", {}), "counters")
    if len(counters_raw) > MAX_ITEMS:
        raise HealthFileError(f"counters: {len(counters_raw)} devices, more than {MAX_ITEMS}")
    counters: dict[str, dict[str, int]] = {}
    for device, row in counters_raw.items():
        where = f"counters.{_text(device, 'counters')}"
        row_map = _mapping(row, where)
        if len(row_map) > MAX_ITEMS:
            raise HealthFileError(f"{where}: more than {MAX_ITEMS} counters")
        counters[device] = {_text(k, where): _int(v, f"{where}.{k}", 0, 1 << 62) for k, v in row_map.items()}
    return HostHealth(
        at=_time(obj.get("at"), "at"),
        settings=settings,
        devices=devices,
        partitions=parts,
        events=events[-MAX_EVENTS:],
        counters=counters,
        polls=_int(obj.get("polls", 0), "polls", 0, 1 << 62),
        errors=_texts(obj.get("errors", []), "errors"),
    )


# ------------------------------------------------------------- primitives


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _only(obj: Mapping[str, object], allowed: set[str], where: str) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise HealthFileError(f"{where or 'file'}: unknown key {unknown[0]!r}")


def _mapping(data: object, where: str) -> Mapping[str, object]:
    if not isinstance(data, dict):
        raise HealthFileError(f"{where or 'file'}: expected an object, got {_show(data)}")
    return data


def _list(data: object, where: str) -> list[object]:
    if not isinstance(data, list):
        raise HealthFileError(f"{where}: expected a list, got {_show(data)}")
    if len(data) > MAX_ITEMS:
        raise HealthFileError(f"{where}: {len(data)} entries, more than {MAX_ITEMS}")
    return data


def _text(data: object, where: str, empty: bool = False) -> str:
    if not isinstance(data, str) or len(data) > MAX_TEXT or (not data and not empty):
        raise HealthFileError(f"{where}: expected 1 to {MAX_TEXT} characters of text, got {_show(data)}")
    if any(ord(c) < 32 or ord(c) == 127 for c in data):
        raise HealthFileError(f"{where}: control character in {_show(data)}")
    return data


def _texts(data: object, where: str) -> tuple[str, ...]:
    return tuple(_text(v, f"{where}[{i}]") for i, v in enumerate(_list(data, where)))


def _int(data: object, where: str, lo: int, hi: int) -> int:
    if not isinstance(data, int) or isinstance(data, bool) or not lo <= data <= hi:
        raise HealthFileError(f"{where}: expected an integer in {lo}..{hi}, got {_show(data)}")
    return data


def _number(data: object, where: str, lo: float, hi: float) -> float:
    if not isinstance(data, int | float) or isinstance(data, bool) or not math.isfinite(data) or not lo <= data <= hi:
        raise HealthFileError(f"{where}: expected a number in {lo:g}..{hi:g}, got {_show(data)}")
    return float(data)


def _time(data: object, where: str) -> float:
    return _number(data, where, 0.0, 1e11)


def _bool(data: object, where: str) -> bool:
    if not isinstance(data, bool):
        raise HealthFileError(f"{where}: expected true or false, got {_show(data)}")
    return data


E = TypeVar("E", bound=enum.Enum)


def _enum(kind: type[E], data: object, where: str) -> E:
    try:
        return kind(data)
    except ValueError:
        names = ", ".join(str(m.value) for m in kind)
        raise HealthFileError(f"{where}: {_show(data)} is not one of {names}") from None
