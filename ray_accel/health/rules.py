"""One partition's health state machine: pure, on frozen values.

`decide(settings, view, facts, now)` takes the partition as the host record
keeps it (`PartitionHealth`, from `view_of`) and what is true now (`Facts`:
its devices' health, whether its raylet runs), reduces that to one
`Seen` (`observe`), and looks up `TABLE`: state x observation -> the effect
on Ray (none, drain, hold, stop, restart) and the partition's state once that
effect has succeeded. The decider keeps the old state where an effect fails,
so a failed step is tried again next poll.

The rules:
- UNKNOWN health is never a reason to take a device out, and never enough
  to bring one back: a device out of service returns only when HEALTHY.
- `report` never changes scheduling: every partition stays serving.
- A worker partition with a device gone bad is drained through Ray (it
  takes no new work; Ray Train moves its runs); when its raylet has exited
  (Ray ends an idle drained raylet) or the drain's deadline has passed, it
  is stopped, then under `shrink` restarted without the bad devices
  (stopped when none is left), under `drain` left stopped.
- A device out of service that is healthy again brings its partition back:
  drained again (a raylet's resources cannot grow) and restarted with it;
  under `drain`, a stopped partition restarts once all its devices are healthy.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from ray_accel.cluster.record import HostRecord, PartitionEntry
from ray_accel.core.health import DeviceHealth, Health
from ray_accel.core.health_state import HealthSettings, OnUnhealthy, PartitionHealth, PartState

# A restart that failed is tried again after this long, not on every poll.
RETRY_S = 30.0
RESTART_FAILED = "restart failed"  # the start of a stopped partition's detail after one


class Effect(enum.Enum):
    NONE = "none"
    DRAIN = "drain"  # ask the GCS to drain the partition's raylet (preemption, with the deadline)
    STOP = "stop"  # stop the partition's raylet by PID; it stays stopped
    RESTART = "restart"  # stop what is left of its raylet, start it serving the step's devices


@dataclass(frozen=True)
class Facts:
    """What is true of one partition now."""

    full: tuple[str, ...]  # its devices as planned
    raylet_alive: bool  # its recorded raylet runs (and is ours)
    health: Mapping[str, DeviceHealth]
    # The devices out of service that may serve again once healthy: their check since
    # they came back passed (or none can run here), or nothing is checked (`proven`).
    proven: frozenset[str] = frozenset()


class Seen(enum.Enum):
    """What a poll sees of a partition (`observe`): a column of `TABLE`."""

    STEADY = "steady"  # nothing to act on, or not yet: a drain before its deadline, a retry
    UNHEALTHY = "unhealthy"  # a device it serves turned unhealthy
    BACK = "back"  # devices out of service are healthy again, none it serves is unhealthy (shrink)
    FULL = "full"  # its drain is over, or it is stopped, and every device may serve
    PART = "part"  # ... and only some may (shrink)
    NOTHING = "nothing"  # ... and none may


# State x what a poll sees -> the effect, and the state once it has succeeded.
# A serving partition sees its devices turn bad or come back; a drained one,
# its drain end; a stopped one, its devices healthy again.
_SERVING = (PartState.SERVING, PartState.SHRUNK)
TABLE: Mapping[tuple[PartState, Seen], tuple[Effect, PartState]] = {
    (PartState.SERVING, Seen.STEADY): (Effect.NONE, PartState.SERVING),
    (PartState.SERVING, Seen.UNHEALTHY): (Effect.DRAIN, PartState.DRAINING),
    (PartState.SERVING, Seen.BACK): (Effect.DRAIN, PartState.RESTORING),
    (PartState.SHRUNK, Seen.STEADY): (Effect.NONE, PartState.SHRUNK),
    (PartState.SHRUNK, Seen.UNHEALTHY): (Effect.DRAIN, PartState.DRAINING),
    (PartState.SHRUNK, Seen.BACK): (Effect.DRAIN, PartState.RESTORING),
    (PartState.DRAINING, Seen.STEADY): (Effect.NONE, PartState.DRAINING),
    (PartState.DRAINING, Seen.FULL): (Effect.RESTART, PartState.SERVING),
    (PartState.DRAINING, Seen.PART): (Effect.RESTART, PartState.SHRUNK),
    (PartState.DRAINING, Seen.NOTHING): (Effect.STOP, PartState.STOPPED),
    (PartState.RESTORING, Seen.STEADY): (Effect.NONE, PartState.RESTORING),
    (PartState.RESTORING, Seen.FULL): (Effect.RESTART, PartState.SERVING),
    (PartState.RESTORING, Seen.PART): (Effect.RESTART, PartState.SHRUNK),
    (PartState.RESTORING, Seen.NOTHING): (Effect.STOP, PartState.STOPPED),
    (PartState.STOPPED, Seen.STEADY): (Effect.NONE, PartState.STOPPED),
    (PartState.STOPPED, Seen.FULL): (Effect.RESTART, PartState.SERVING),
    (PartState.STOPPED, Seen.PART): (Effect.RESTART, PartState.SHRUNK),
    (PartState.STOPPED, Seen.NOTHING): (Effect.NONE, PartState.STOPPED),
}


@dataclass(frozen=True)
class Step:
    view: PartitionHealth  # the partition once `effect` has succeeded
    effect: Effect
    message: str = ""  # a drain's message (Ray shows it as the node's death reason)


def state_of(health: Mapping[str, DeviceHealth], device: str) -> Health:
    found = health.get(device)
    return Health.UNKNOWN if found is None else found.state


def why(health: Mapping[str, DeviceHealth], device: str) -> str:
    """`neuron:11: XID 79 (...)`: a device and its last event's reason."""
    found = health.get(device)
    if found is None or found.last_event is None:
        return f"{device}: {state_of(health, device).value}"
    return f"{device}: {found.last_event.reason}"


def wanted(
    full: Sequence[str], out: Sequence[str], health: Mapping[str, DeviceHealth], proven: Collection[str]
) -> tuple[str, ...]:
    """The devices that should serve: those in service that are not
    unhealthy, and those out of service that are healthy again and proven
    (their check passed)."""
    return tuple(d for d in full if SERVES[d in out, state_of(health, d), d in proven])


# Out of service? x its health x proven -> whether it should serve: the table of `wanted`.
# A device in service needs no proof and serves unless unhealthy (unknown is never a
# reason to take one out); one out of service returns only HEALTHY and proven.
SERVES: Mapping[tuple[bool, Health, bool], bool] = {
    **{(False, h, p): h is not Health.UNHEALTHY for h in Health for p in (False, True)},
    **{(True, h, p): h is Health.HEALTHY and p for h in Health for p in (False, True)},
}


def _detail(health: Mapping[str, DeviceHealth], out: Sequence[str]) -> str:
    # What makes each healthy again is the device's own (`ray-accel health`).
    return "; ".join(why(health, d) for d in out)


def view_of(record: HostRecord, p: PartitionEntry) -> PartitionHealth:
    """Partition `p` as the record keeps it: what its raylet serves, and out
    of service what it does not, with what a drain under way takes out
    (every device it will not serve once the drain ends)."""
    held = record.state_of(p)
    out = _out(p.device_ids, p.out, held.target)
    serves = p.serving.device_ids
    return PartitionHealth(
        partition=p.name,
        state=held.state,
        since=held.since,
        devices=serves,
        out=out,
        node_id=p.node_id,
        detail=held.detail,
        deadline=held.deadline,
        target=held.target,
        head=p.head,
    )


def _out(full: Sequence[str], out: Sequence[str], target: Sequence[str] | None) -> tuple[str, ...]:
    return tuple(d for d in full if d in out or (target is not None and d not in target))


def observe(settings: HealthSettings, view: PartitionHealth, facts: Facts, now: float) -> tuple[Seen, tuple[str, ...]]:
    """What a poll sees of the partition in its state, and the devices that
    should serve: a serving one's devices turning bad or coming back, a
    drained one's drain ending, a stopped one's devices healthy again."""
    full, health = facts.full, facts.health
    if view.state in _SERVING:
        target = wanted(full, view.out, health, facts.proven)
        if any(d not in target for d in view.devices):
            return Seen.UNHEALTHY, target
        back = any(d not in view.devices for d in target) and settings.action is OnUnhealthy.SHRINK
        return (Seen.BACK if back else Seen.STEADY), target
    if view.state is PartState.STOPPED:
        target = wanted(full, full, health, facts.proven)
        if view.detail.startswith(RESTART_FAILED) and now < view.since + RETRY_S:
            return Seen.STEADY, target
        if settings.action is OnUnhealthy.DRAIN and target != full:
            return Seen.STEADY, target  # under drain it comes back whole or not at all
    elif facts.raylet_alive and view.deadline is not None and now < view.deadline:
        return Seen.STEADY, view.devices
    else:
        target = tuple(d for d in view.target or () if state_of(health, d) is not Health.UNHEALTHY)
    return (Seen.FULL if target == full else Seen.PART if target else Seen.NOTHING), target


def decide(settings: HealthSettings, view: PartitionHealth, facts: Facts, now: float) -> Step:
    health = facts.health
    full = facts.full
    if settings.action is OnUnhealthy.REPORT:
        bad = [d for d in full if state_of(health, d) is Health.UNHEALTHY]
        detail = f"reported only (--on-unhealthy report): {_detail(health, bad)}" if bad else ""
        return Step(replace(view, state=PartState.SERVING, devices=full, out=(), detail=detail), Effect.NONE)
    seen, target = observe(settings, view, facts, now)
    effect, state = TABLE[view.state, seen]
    if effect is Effect.NONE:
        if state in _SERVING:
            view = replace(view, detail=f"without {_detail(health, view.out)}" if view.out else "")
        return Step(view, effect)
    if effect is Effect.RESTART:
        out = [d for d in full if d not in target]
        return Step(_settled(view, state, now, target, full, f"without {_detail(health, out)}" if out else ""), effect)
    if effect is Effect.STOP:
        why_out = _detail(health, [d for d in full if state_of(health, d) is Health.UNHEALTHY])
        detail = f"stopped: {why_out or 'its devices are out of service'}"
        return Step(_settled(view, state, now, (), full, detail), effect)
    bad = [d for d in view.devices if d not in target]
    back = [d for d in target if d not in view.devices]
    target = () if settings.action is OnUnhealthy.DRAIN else target
    shrinks = settings.action is OnUnhealthy.SHRINK and bad
    verb = "restarted without it" if shrinks else ("restarted with it" if back else "stopped")
    what = f"to restart with {len(target)} of {len(full)} devices" if target else "to stop"
    detail = f"drained {what}: {_detail(health, bad) if bad else ', '.join(back) + ' healthy again'}"
    deadline = now + settings.drain_deadline_s
    view = replace(
        view, state=state, since=now, out=_out(full, view.out, target), deadline=deadline, target=target, detail=detail
    )
    # The drain's reason, as Ray records it for the raylet.
    reasons = "; ".join([why(health, d) for d in bad] + [f"{d}: healthy again" for d in back])
    return Step(view, effect, f"ray-accel health: {reasons}; partition {view.partition} is drained and {verb}")


def _settled(
    view: PartitionHealth, state: PartState, now: float, devices: Sequence[str], full: Sequence[str], detail: str
) -> PartitionHealth:
    """In `state` since `now`, serving `devices`, the others out, no drain under way."""
    out = tuple(d for d in full if d not in devices)
    return replace(
        view, state=state, since=now, devices=tuple(devices), out=out, deadline=None, target=None, detail=detail
    )


def free_devices(record: HostRecord) -> tuple[str, ...]:
    """The devices out of service that no raylet serves: out of a partition
    that has shrunk or stopped (its restart done), none of a change under way."""
    settled = (PartState.SERVING, PartState.SHRUNK, PartState.STOPPED)
    return tuple(
        d
        for p in record.partitions
        if not record.in_change(p.name) and record.state_of(p).state in settled
        for d in p.out
        if d not in p.serving.device_ids
    )


def kept_in(record: HostRecord) -> frozenset[str]:
    """The devices no fault took out of service (not in their partition's `out`):
    they need no proof. A stopped partition's rule reads every device as out,
    so these are what `Facts.proven` holds for it without a check."""
    return frozenset(d for p in record.partitions for d in p.device_ids if d not in p.out)
