"""The bookkeeping every family's health rule shares, pure and vendor-free.

A family's rule (in its backend) turns what its sources said in one poll
into `Findings` per device; `advance` folds them into the device's
`Tracked` state. Two kinds of fault:

- **sticky**: opened by a fatal event (an XID the family counts as fatal,
  an error counter that grew). No source ever says such a device is well
  again, so the fault stays until a person clears it (`clear`).
- **level**: a condition a source reads on every poll (the device is
  absent; the driver lists unhealthy components). It ends after K clean
  readings in a row; a poll that cannot read the source is no reading (it
  neither counts nor breaks the run), a bad reading starts the run again.

A device is UNHEALTHY while it has a fault; otherwise UNKNOWN if any of its
sources could not be read this poll (or none can vouch for it at all, or its
kept health could not be read and only a person can end the doubt), else
HEALTHY. A non-fatal event only counts: it is reported, and changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ray_accel.core.errors import InputError
from ray_accel.core.health import DeviceHealth, Health, HealthEvent, HealthReport, one_line
from ray_accel.core.validate import ascii_int

RECOVERY_POLLS_ENV = "RAYACCEL_HEALTH_RECOVERY_POLLS"
DEFAULT_RECOVERY_POLLS = 3
MAX_RECOVERY_POLLS = 10_000


def recovery_polls(environ: Mapping[str, str]) -> int:
    """K, the clean polls in a row that end a level fault
    (`RAYACCEL_HEALTH_RECOVERY_POLLS`, 1..10000, default 3); an `InputError` naming the value."""
    raw = environ.get(RECOVERY_POLLS_ENV)
    if raw is None:
        return DEFAULT_RECOVERY_POLLS
    return ascii_int(raw, RECOVERY_POLLS_ENV, 1, MAX_RECOVERY_POLLS)


def cleared_by_hand(device_id: str) -> str:
    return f"cleared by hand: ray-accel health clear {device_id}"


@dataclass(frozen=True)
class Level:
    """One reading of a condition a source shows on every poll."""

    kind: str  # the fault it opens ("lost", "components")
    bad: HealthEvent | None  # None: the source reads clean; else what is wrong (fatal)
    clean_words: str  # what a clean reading is, in words: "present", "no unhealthy component"


@dataclass(frozen=True)
class Findings:
    """What a family's sources said about one device in one poll."""

    device_id: str
    # Sources read this poll that would show a fault: only they make a device HEALTHY.
    vouched: tuple[str, ...] = ()
    # "<source>: <cause>" for each source that could not be read this poll.
    unread: tuple[str, ...] = ()
    # Edge events, in the order seen: a fatal one opens (or renews) a sticky fault of its kind.
    events: tuple[HealthEvent, ...] = ()
    levels: tuple[Level, ...] = ()

    def merged(self, other: Findings) -> Findings:
        return Findings(
            self.device_id,
            vouched=self.vouched + other.vouched,
            unread=self.unread + other.unread,
            events=self.events + other.events,
            levels=self.levels + other.levels,
        )


@dataclass(frozen=True)
class Fault:
    kind: str
    event: HealthEvent  # what opened it (the latest, for a sticky fault renewed)
    sticky: bool
    clean: int = 0  # clean readings counted so far (level faults)
    clean_words: str = ""


@dataclass(frozen=True, kw_only=True)
class Tracked:
    """One device's state between polls."""

    device_id: str
    state: Health
    since: float
    last_event: HealthEvent | None = None
    faults: tuple[Fault, ...] = ()
    unread: tuple[str, ...] = ()  # this poll's unreadable sources (why it is UNKNOWN)
    doubt: str = ""  # why it is UNKNOWN until cleared by hand (its kept health could not be read)


def start(device_ids: Iterable[str], now: float) -> tuple[Tracked, ...]:
    """Before the first poll every device is UNKNOWN."""
    return tuple(Tracked(device_id=d, state=Health.UNKNOWN, since=now) for d in device_ids)


def _put(faults: list[Fault], fault: Fault) -> None:
    """`fault` in place of the first of its kind, else after the others."""
    i = next((i for i, f in enumerate(faults) if f.kind == fault.kind), len(faults))
    faults[i : i + 1] = [fault]


def advance(prev: Tracked, findings: Findings, now: float, k: int) -> tuple[Tracked, tuple[HealthEvent, ...]]:
    """The device's state after this poll, and the events new in it."""
    faults = list(prev.faults)
    new = list(findings.events)
    for e in new:
        if e.fatal:
            _put(faults, Fault(e.kind, e, sticky=True))
    for level in findings.levels:
        open_ = next((f for f in faults if f.kind == level.kind), None)
        if level.bad is not None:
            if open_ is None or not level.bad.same(open_.event):
                new.append(level.bad)
                sticky = open_ is not None and open_.sticky
                _put(faults, Fault(level.kind, level.bad, sticky, 0, level.clean_words))
            elif open_.clean:
                _put(faults, replace(open_, clean=0))  # a bad reading starts the run again
        elif open_ is not None and not open_.sticky:
            if open_.clean + 1 >= k:
                faults.remove(open_)
            else:
                _put(faults, replace(open_, clean=open_.clean + 1))
    if faults:
        state = Health.UNHEALTHY
    elif prev.doubt or findings.unread or not findings.vouched:
        state = Health.UNKNOWN
    else:
        state = Health.HEALTHY
    since = prev.since if state is prev.state else now
    last = new[-1] if new else prev.last_event
    after = replace(prev, state=state, since=since, last_event=last, faults=tuple(faults), unread=findings.unread)
    return after, tuple(new)


def clear(prev: Tracked) -> Tracked:
    """A person said the device is fixed: its sticky faults are dropped. A
    level fault stays (its source still reads it); the next poll decides the state."""
    return replace(prev, faults=tuple(f for f in prev.faults if not f.sticky), doubt="")


def healthy_again(t: Tracked, k: int) -> str:
    """What makes the device healthy again, in words."""
    if t.state is Health.HEALTHY:
        return ""
    if t.state is Health.UNKNOWN:
        if t.doubt:
            return f"{cleared_by_hand(t.device_id)} ({t.doubt})"
        if t.unread:
            return "a poll that reads its health sources (unreadable now: " + "; ".join(t.unread) + ")"
        return "a poll that reads a health source of it (none can be read)"
    parts = []
    for f in t.faults:
        if f.sticky:
            parts.append(f"{cleared_by_hand(t.device_id)} ({f.event.reason})")
        else:
            parts.append(f"{f.clean_words} for {k} polls in a row ({f.clean} so far)")
    return "; and ".join(parts)


def verdict(t: Tracked, k: int) -> DeviceHealth:
    return DeviceHealth(t.device_id, t.state, t.since, t.last_event, one_line(healthy_again(t, k)))


def step_all(
    previous: Sequence[Tracked], findings: Mapping[str, Findings], errors: Iterable[str], now: float, k: int
) -> tuple[tuple[Tracked, ...], HealthReport]:
    """Every device advanced by its findings (a device without any: nothing
    could be read of it), and the poll's report."""
    tracked = []
    events: list[HealthEvent] = []
    for prev in previous:
        t, new = advance(prev, findings.get(prev.device_id, Findings(prev.device_id)), now, k)
        tracked.append(t)
        events += new
    unread = [f"{t.device_id}: {u}" for t in tracked for u in t.unread]
    out_errors = tuple(dict.fromkeys(one_line(e, 1024) for e in [*errors, *unread]))
    report = HealthReport(now, tuple(verdict(t, k) for t in tracked), tuple(events), out_errors)
    return tuple(tracked), report


def clear_device(tracked: Sequence[Tracked], device_id: str) -> tuple[Tracked, ...]:
    """`clear` on `device_id`; an `InputError` naming it when it is not one of `tracked`."""
    if device_id not in {t.device_id for t in tracked}:
        known = ", ".join(t.device_id for t in tracked)
        raise InputError(f"no device {device_id!r} on this host (devices: {known})")
    return tuple(clear(t) if t.device_id == device_id else t for t in tracked)
