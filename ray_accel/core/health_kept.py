"""Each device's health as its family's rule needs it to stay right across
a decider's restart, `ray-accel stop` and a reboot: `<state dir>/devices.json`,
apart from the host's record (which `stop` removes).

Per device: its open faults (a sticky one with the event that opened it, a
level one with its clean readings counted so far), each counter's last
reading (the baseline the next poll compares with, so a counter that grew
while no decider ran is still growth), and a doubt (why its health is
unknown until a person clears it), and the decider's proof: its last
check and repair, and a check under way (`checking`), so a decider killed
mid-check checks again, never returns the device unchecked. The decider writes it after every poll;
`ray-accel health clear` edits it where no decider runs.

A file that is missing, unreadable, truncated or of another version is
never read as "healthy": `read_kept` says why nothing is known
(`Kept.unknown`), and the caller keeps out what it had out (`doubted`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from pathlib import Path

from ray_accel.core.checks import CheckResult, RepairResult
from ray_accel.core.health import Health
from ray_accel.core.health_state import HealthFileError, read_health
from ray_accel.core.health_track import Fault, Tracked
from ray_accel.core.reader import Cursor, ReadError, dump, load, parse_json, read_file

KEPT_FILE = "devices.json"
VERSION = 1
MAX_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class KeptDevice:
    device_id: str
    since: float  # when it entered the state it had
    faults: tuple[Fault, ...] = ()
    counters: Mapping[str, int] = field(default_factory=dict)  # last reading of each counter, by name
    doubt: str = ""  # why its health is unknown until cleared by hand ("": none)
    # The decider's proof of the device (kept by keyword: a later field never shifts these).
    _: KW_ONLY
    check: CheckResult | None = None  # its last check that ended
    checking: float | None = None  # when a check under way began (None: none); one left here was cut short
    repair: RepairResult | None = None  # its last repair (one begun and cut short: ended == started, failed)

    @property
    def out(self) -> bool:
        """Out of service: a fault open, or a doubt only a person ends."""
        return bool(self.faults or self.doubt)

    def reason(self) -> str:
        """Why it is out, in one line."""
        return "; ".join([*(f.event.reason for f in self.faults), *([self.doubt] if self.doubt else [])])


@dataclass(frozen=True)
class Kept:
    """What the file says: every device kept, or why nothing is known."""

    devices: tuple[KeptDevice, ...] = ()
    unknown: str = ""  # "": read; else why the devices' health is unknown
    found: bool = True  # False: no file (nothing was ever kept here)

    def out(self) -> dict[str, str]:
        """Each device out of service, with why."""
        return {d.device_id: d.reason() for d in self.devices if d.out}


def dumps(devices: Iterable[KeptDevice], at: float) -> str:
    return json.dumps({"version": VERSION, "at": at, "devices": dump(tuple(devices))}, indent=1, allow_nan=False)


def parse_kept(raw: bytes | str, source: str) -> Kept:
    """The file's content: its devices, or unknown with why (never an error:
    any content is one or the other)."""
    try:
        obj = Cursor(parse_json(raw, source), source).only({"version", "at", "devices"})
        version = obj.at("version", None).data
        if version != VERSION or isinstance(version, bool):
            raise ReadError(f"version {version!r}; this ray-accel reads version {VERSION}", source)
        obj.at("at").number(0.0)
        devices = tuple(load(KeptDevice, d.data, d.path) for d in obj.at("devices").list())
        if len({d.device_id for d in devices}) != len(devices):
            raise ReadError("a device is listed twice", f"{source}: devices")
    except ReadError as e:
        return Kept(unknown=f"device health unknown: {e}")
    return Kept(devices)


def read_kept(directory: Path) -> Kept:
    path = directory / KEPT_FILE
    try:
        raw = read_file(path, f"device health file {path}", MAX_BYTES)
    except ReadError as e:
        return Kept(unknown=f"device health unknown: {e}")
    if raw is None:
        return Kept(unknown=f"device health unknown: no {path}", found=False)
    return parse_kept(raw, f"device health file {path}")


def doubted(kept: Kept, out: Iterable[str], now: float) -> tuple[KeptDevice, ...]:
    """What to resume from: the file's devices; where it is unknown, each
    device in `out` (what the host's record had out of service) kept out, in doubt."""
    if not kept.unknown:
        return kept.devices
    doubt = f"{kept.unknown}; it was out of service"
    return tuple(KeptDevice(device_id=d, since=now, doubt=doubt) for d in dict.fromkeys(out))


def keep(t: Tracked, counters: Mapping[str, int]) -> KeptDevice:
    return KeptDevice(device_id=t.device_id, since=t.since, faults=t.faults, counters=dict(counters), doubt=t.doubt)


def resume(tracked: Sequence[Tracked], kept: Sequence[KeptDevice]) -> tuple[Tracked, ...]:
    """`tracked` with each kept device's faults and doubt back (a device with
    a fault is unhealthy again before any poll)."""
    by_id = {k.device_id: k for k in kept}
    out = []
    for t in tracked:
        k = by_id.get(t.device_id)
        if k is None:
            out.append(t)
            continue
        last = k.faults[-1].event if k.faults else None
        state = Health.UNHEALTHY if k.faults else Health.UNKNOWN
        out.append(replace(t, state=state, since=k.since, last_event=last, faults=k.faults, doubt=k.doubt))
    return tuple(out)


def baselines(kept: Sequence[KeptDevice], device_ids: Iterable[str]) -> dict[tuple[str, str], int]:
    """(device, counter) -> its last reading, for the devices in `device_ids`."""
    ids = set(device_ids)
    return {(k.device_id, n): c for k in kept if k.device_id in ids for n, c in k.counters.items()}


def cleared(devices: Sequence[KeptDevice], device_id: str) -> tuple[KeptDevice, ...]:
    """A person said `device_id` is fixed: its sticky faults and doubt dropped;
    its level faults stay (its source still reads them)."""
    return tuple(
        replace(d, faults=tuple(f for f in d.faults if not f.sticky), doubt="") if d.device_id == device_id else d
        for d in devices
    )


@dataclass(frozen=True)
class OutOfService:
    """Which devices are out of service, with why, and what to say when part
    of that answer could not be read."""

    devices: Mapping[str, str] = field(default_factory=dict)
    note: str | None = None


def out_of_service(directory: Path | None, recorded: Iterable[str] = (), now: float | None = None) -> OutOfService:
    """The one answer to "which devices are out of service", for `start`,
    `plan`, `repartition`, the decider and `health clear`: what the kept
    device health (`devices.json` in `directory`) has out. A device is never
    back in service for want of a file: where that file is missing or cannot
    be read, the devices `recorded` out (the host record's) and those the
    last health report (`health.json`) had out stay out, in doubt, and `note`
    says why."""
    if directory is None:
        return OutOfService()
    kept = read_kept(directory)
    if not kept.unknown:
        return OutOfService(kept.out())
    try:
        health = read_health(directory)
    except HealthFileError:
        health = None
    last = [d for p in health.partitions for d in p.out] if health is not None else []
    was_out = [*recorded, *last]
    if not kept.found and not was_out:
        return OutOfService()  # nothing was ever kept here, and nothing was out: every device in service
    doubt = Kept(doubted(kept, was_out, now if now is not None else 0.0)).out()
    stays = "what the last health report had out stays out" if doubt else "every device starts in service"
    return OutOfService(doubt, f"{kept.unknown}: {stays}")
