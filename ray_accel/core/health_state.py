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
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from ray_accel.core import validate
from ray_accel.core.checks import DEFAULT_CHECK_TIMEOUT_S, CheckResult, RepairResult
from ray_accel.core.errors import InputError
from ray_accel.core.health import DeviceHealth, HealthEvent
from ray_accel.core.reader import Cursor, ReadError, dump_fields, load, parse_document, read_file

VERSION = 1
HEALTH_FILE = "health.json"
MAX_BYTES = 8 * 1024 * 1024
MAX_EVENTS = 100  # the file keeps the last ones, newest last
MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 3600.0
MAX_DEADLINE_S = 7 * 24 * 3600.0
MAX_TIME = 1e11
DEFAULT_CHECK_INTERVAL_S = 10.0
# As `check_runner.check_timeout` bounds it (above 0, at most a day); 60 s by default (`checks`).
MIN_CHECK_TIMEOUT_S = 0.001
MAX_CHECK_TIMEOUT_S = 24 * 3600.0


class HealthFileError(ReadError):
    """`health.json` does not fit its schema."""


class OnUnhealthy(enum.Enum):
    """What the decider does when a device of a partition turns unhealthy
    (`ray-accel start --on-unhealthy`)."""

    REPORT = "report"  # say so (health, status, top, metrics); scheduling is left as it is
    DRAIN = "drain"  # drain the partition through Ray; stop its raylet at the deadline
    SHRINK = "shrink"  # drain, then restart the partition without the device


class Repair(enum.Enum):
    """What the decider may do to repair a device out of service (`ray-accel start --repair`)."""

    OFF = "off"  # nothing: the repair is the operator's
    RESET = "reset"  # the backend's repair (a GPU reset) where the driver asks for one, once per fault


class PartState(enum.Enum):
    """A partition as the decider sees it."""

    SERVING = "serving"  # every device it was planned with
    DRAINING = "draining"  # drained through Ray: takes no new work; stopped at the deadline
    SHRUNK = "shrunk"  # serving without its unhealthy devices
    RESTORING = "restoring"  # drained again, to be restarted with devices that are healthy again
    STOPPED = "stopped"  # its raylet stopped by the decider; nothing of it serves

    @property
    def exporting(self) -> bool:
        """Whether the partition's metrics exporter runs: not while stopped, nor while its raylet drains."""
        return self in (PartState.SERVING, PartState.SHRUNK)


@dataclass(frozen=True, kw_only=True)
class HealthSettings:
    """The choices `start` made for the host's decider (kept in the host record)."""

    action: OnUnhealthy = OnUnhealthy.REPORT
    interval_s: float = 5.0
    drain_deadline_s: float = 120.0
    # Given by keyword: what proves a device before it returns, and what repairs it.
    _: KW_ONLY
    return_check: bool = True  # a device out of service returns only once its check passes
    check_interval_s: float = DEFAULT_CHECK_INTERVAL_S  # between a failed (or timed out) check and the next
    check_timeout_s: float = DEFAULT_CHECK_TIMEOUT_S  # one check's time limit
    repair: Repair = Repair.OFF

    @classmethod
    def from_json(cls, data: object, where: str = "health") -> HealthSettings:
        """The settings as kept; a record from before the checks reads with their defaults."""
        obj = Cursor(data, where).only(SETTINGS_KEYS)
        return cls(
            action=obj.at("action", None).enum(OnUnhealthy),
            interval_s=obj.at("interval_s", None).number(MIN_INTERVAL_S, MAX_INTERVAL_S),
            drain_deadline_s=obj.at("drain_deadline_s", None).number(0.0, MAX_DEADLINE_S),
            return_check=obj.at("return_check", True).bool(),
            check_interval_s=obj.at("check_interval_s", DEFAULT_CHECK_INTERVAL_S).number(0.0, MAX_INTERVAL_S),
            check_timeout_s=obj.at("check_timeout_s", DEFAULT_CHECK_TIMEOUT_S).number(
                MIN_CHECK_TIMEOUT_S, MAX_CHECK_TIMEOUT_S
            ),
            repair=obj.at("repair", Repair.OFF.value).enum(Repair),
        )


SETTINGS_KEYS = (
    "action",
    "interval_s",
    "drain_deadline_s",
    "return_check",
    "check_interval_s",
    "check_timeout_s",
    "repair",
)


@dataclass(frozen=True)
class PartitionState:
    """A partition's state by the host's decider: one per partition, kept in
    the host record (a decider that starts again resumes from it);
    `health.json` and `status` report it."""

    state: PartState = PartState.SERVING
    since: float = 0.0  # when it entered `state`
    detail: str = ""  # one line a user reads: why it is in this state, what comes next
    deadline: float | None = None  # a drain's: when the decider stops the raylet
    target: tuple[str, ...] | None = None  # a drain's: the devices it serves once restarted


@dataclass(frozen=True, kw_only=True)
class PartitionHealth:
    """One partition of the host, as the decider left it after a poll: its
    `PartitionState` (`held`) with what its raylet serves."""

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

    def __post_init__(self) -> None:
        try:
            validate.partition_name(self.partition)
        except InputError as e:  # `load` names the field
            raise ReadError(str(e), "partition") from None

    @property
    def held(self) -> PartitionState:
        """What the host record keeps of it."""
        return PartitionState(self.state, self.since, self.detail, self.deadline, self.target)


@dataclass(frozen=True, kw_only=True)
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
    _: KW_ONLY
    # The decider's proofs: each device's last check and repair, the checks under way
    # (device -> since), and how many checks and repairs it made (device -> outcome -> count).
    checks: tuple[CheckResult, ...] = ()
    repairs: tuple[RepairResult, ...] = ()
    checking: Mapping[str, float] = field(default_factory=dict)
    check_counts: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    repair_counts: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def partition(self, name: str) -> PartitionHealth | None:
        return next((p for p in self.partitions if p.partition == name), None)


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


def to_json(health: HostHealth) -> dict[str, Any]:
    """`health.json`'s object: the settings flattened into the top level."""
    fields = dump_fields(health, **dump_fields(health.settings))
    del fields["settings"]
    return {"version": VERSION, **fields}


def dumps(health: HostHealth) -> str:
    return json.dumps(to_json(health), indent=1, allow_nan=False)


def parse_health(raw: bytes | str, source: str) -> HostHealth:
    """The health state in `raw` (the bytes of `source`), or `HealthFileError`
    naming `source` and what does not fit."""
    return parse_document(raw, f"health file {source}", _health, HealthFileError, "does not fit")


def read_health(directory: Path) -> HostHealth | None:
    """`<directory>/health.json`, None where there is none yet, or
    `HealthFileError` naming it when it cannot be used."""
    path = directory / HEALTH_FILE
    try:
        raw = read_file(path, f"health file {path}", MAX_BYTES)
    except ReadError as e:
        raise HealthFileError(str(e)) from None
    return None if raw is None else parse_health(raw, str(path))


_PROOFS = ("checks", "repairs", "checking", "check_counts", "repair_counts")
_TOP = {"version", "at", *SETTINGS_KEYS, "polls", "devices", "events", "partitions"}


def _health(obj: Cursor) -> HostHealth:
    obj.only({*_TOP, "counters", "errors", *_PROOFS})
    version = obj.mapping().get("version")
    if version != VERSION or isinstance(version, bool):
        raise ReadError(f"{version!r}; this ray-accel reads version {VERSION}", "version")
    settings = HealthSettings.from_json({k: obj.mapping()[k] for k in SETTINGS_KEYS if k in obj.mapping()}, "settings")
    devices = tuple(load(DeviceHealth, d.data, d.path) for d in obj.at("devices", None).list())
    parts = tuple(load(PartitionHealth, p.data, p.path) for p in obj.at("partitions", None).list())
    for key, names in (("devices", [d.device_id for d in devices]), ("partitions", [p.partition for p in parts])):
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise ReadError(f"{dup!r} appears twice", key)
    events = tuple(load(HealthEvent, e.data, e.path) for e in obj.at("events", []).list())
    counters = {
        Cursor(device, "counters").text(): {Cursor(k, row.path).text(): v.int(0, 1 << 62) for k, v in row.items()}
        for device, row in obj.at("counters", {}).items()
    }
    return HostHealth(
        at=obj.at("at", None).number(0.0, MAX_TIME),
        settings=settings,
        devices=devices,
        partitions=parts,
        events=events[-MAX_EVENTS:],
        counters=counters,
        polls=obj.at("polls", 0).int(0, 1 << 62),
        errors=obj.at("errors", []).texts(),
        checks=tuple(load(CheckResult, c.data, c.path) for c in obj.at("checks", []).list()),
        repairs=tuple(load(RepairResult, r.data, r.path) for r in obj.at("repairs", []).list()),
        checking={Cursor(d, "checking").text(): t.number(0.0, MAX_TIME) for d, t in obj.at("checking", {}).items()},
        check_counts=_counts(obj.at("check_counts", {})),
        repair_counts=_counts(obj.at("repair_counts", {})),
    )


def _counts(node: Cursor) -> dict[str, dict[str, int]]:
    """device -> outcome -> count."""
    return {
        Cursor(device, node.path).text(): {Cursor(k, row.path).text(): v.int(0, 1 << 62) for k, v in row.items()}
        for device, row in node.items()
    }
