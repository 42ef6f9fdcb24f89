"""One partition's health state machine: pure, on frozen values.

`decide(settings, view, facts, now)` takes what the decider knew of the
partition after the last poll (`PartitionHealth`), what is true now
(`Facts`: its devices' health, whether its raylet runs) and returns the
`Step` to take: the effect on Ray (none, drain, stop, restart) and the
partition's state once that effect has succeeded. The decider keeps the old
state where an effect fails, so a failed step is tried again next poll.

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
- The head partition cannot be restarted (the GCS runs there) and a drained
  raylet with nothing running exits, so a bad device on the head drains it
  and holds it (a keeper actor keeps it from going idle): it takes no new
  work until the cluster is stopped, whatever the device does next.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ray_accel.core.health import DeviceHealth, Health
from ray_accel.core.health_state import Action, HealthSettings, PartitionHealth, PartState

# A restart that failed is tried again after this long, not on every poll.
RETRY_S = 30.0


class Effect(enum.Enum):
    NONE = "none"
    DRAIN = "drain"  # ask the GCS to drain the partition's raylet (preemption, with the deadline)
    HOLD = "hold"  # the head: place its keeper, then drain it
    STOP = "stop"  # stop the partition's raylet by PID; it stays stopped
    RESTART = "restart"  # stop what is left of its raylet, start it serving `devices`


@dataclass(frozen=True)
class Facts:
    """What is true of one partition now."""

    full: tuple[str, ...]  # its devices as planned
    head: bool
    raylet_alive: bool  # its recorded raylet runs (and is ours)
    node_id: str | None
    health: Mapping[str, DeviceHealth]


@dataclass(frozen=True)
class Step:
    view: PartitionHealth  # the partition once `effect` has succeeded
    effect: Effect
    message: str = ""  # a drain's message (Ray shows it as the node's death reason)
    devices: tuple[str, ...] = ()  # RESTART: what the partition serves after it


def state_of(health: Mapping[str, DeviceHealth], device: str) -> Health:
    found = health.get(device)
    return Health.UNKNOWN if found is None else found.state


def why(health: Mapping[str, DeviceHealth], device: str) -> str:
    """`neuron:11: XID 79 (...)`: a device and its last event's reason."""
    found = health.get(device)
    if found is None or found.last_event is None:
        return f"{device}: {state_of(health, device).value}"
    return f"{device}: {found.last_event.reason}"


def wanted(full: Sequence[str], out: Sequence[str], health: Mapping[str, DeviceHealth]) -> tuple[str, ...]:
    """The devices that should serve: those in service that are not
    unhealthy, and those out of service that are healthy again."""
    gone = set(out)
    return tuple(
        d
        for d in full
        if (state_of(health, d) is Health.HEALTHY if d in gone else state_of(health, d) is not Health.UNHEALTHY)
    )


def drain_message(
    name: str,
    bad: Sequence[str],
    back: Sequence[str],
    health: Mapping[str, DeviceHealth],
    action: Action,
    head: bool = False,
) -> str:
    """The drain's reason, as Ray records it for the raylet."""
    parts = [why(health, d) for d in bad] + [f"{d}: healthy again" for d in back]
    if head:
        verb = "held (the head cannot be restarted)"
    elif action is Action.SHRINK and bad:
        verb = "restarted without it"
    else:
        verb = "restarted with it" if back else "stopped"
    return f"ray-accel health: {'; '.join(parts)}; partition {name} is drained and {verb}"


def _detail(health: Mapping[str, DeviceHealth], out: Sequence[str]) -> str:
    # What makes each healthy again is the device's own (`ray-accel health`).
    return "; ".join(why(health, d) for d in out)


def decide(settings: HealthSettings, view: PartitionHealth, facts: Facts, now: float) -> Step:
    health = facts.health
    full = facts.full
    if settings.action is Action.REPORT:
        bad = [d for d in full if state_of(health, d) is Health.UNHEALTHY]
        detail = f"reported only (--on-unhealthy report): {_detail(health, bad)}" if bad else ""
        return Step(replace(view, state=PartState.SERVING, devices=full, out=(), detail=detail), Effect.NONE)

    if view.state in (PartState.SERVING, PartState.SHRUNK):
        target = wanted(full, view.out, health)
        bad = [d for d in view.devices if d not in target]
        back = [d for d in target if d not in view.devices]
        if not bad and not back:
            detail = f"without {_detail(health, view.out)}" if view.out else ""
            return Step(replace(view, node_id=facts.node_id, detail=detail), Effect.NONE)
        if facts.head:
            if not bad:
                return Step(view, Effect.NONE)  # the head never shrank: nothing to bring back
            out = tuple(d for d in full if d in {*view.out, *bad})
            detail = (
                f"head partition drained and held: {_detail(health, bad)}; it cannot be restarted (the GCS runs "
                "there): it takes no new work until `ray-accel stop`"
            )
            view = replace(view, state=PartState.DRAINING, since=now, out=out, detail=detail, target=None)
            return Step(view, Effect.HOLD, drain_message(view.partition, bad, [], health, Action.DRAIN, head=True))
        if settings.action is Action.DRAIN:
            if not bad:
                return Step(view, Effect.NONE)
            target = ()
        deadline = now + settings.drain_deadline_s
        out = tuple(d for d in full if d not in view.devices or d in bad)
        state = PartState.DRAINING if bad else PartState.RESTORING
        what = f"to restart with {len(target)} of {len(full)} devices" if target else "to stop"
        detail = f"drained {what}: {_detail(health, bad) if bad else ', '.join(back) + ' healthy again'}"
        view = replace(view, state=state, since=now, out=out, deadline=deadline, target=target, detail=detail)
        return Step(view, Effect.DRAIN, drain_message(view.partition, bad, back, health, settings.action))

    if view.state in (PartState.DRAINING, PartState.RESTORING):
        if facts.head:
            return Step(view, Effect.NONE)  # held until the cluster stops
        target = tuple(d for d in (view.target or ()) if state_of(health, d) is not Health.UNHEALTHY)
        due = view.deadline is None or now >= view.deadline
        if facts.raylet_alive and not due:
            return Step(view, Effect.NONE)
        if target:
            return Step(replace(view, target=target), Effect.RESTART, devices=target)
        bad = [d for d in full if state_of(health, d) is Health.UNHEALTHY]
        return Step(
            _stopped(view, full, now, f"stopped: {_detail(health, bad) or 'its devices are out of service'}"),
            Effect.STOP,
        )

    # STOPPED: back once its devices are healthy (all of them under `drain`).
    if facts.head:
        return Step(view, Effect.NONE)  # never stopped by the decider; never restarted
    target = wanted(full, full, health)
    if not target or (settings.action is Action.DRAIN and target != full):
        return Step(view, Effect.NONE)
    if view.detail.startswith("restart failed") and now < view.since + RETRY_S:
        return Step(view, Effect.NONE)
    return Step(replace(view, target=target), Effect.RESTART, devices=target)


def restarted(
    view: PartitionHealth,
    full: Sequence[str],
    devices: Sequence[str],
    node_id: str | None,
    health: Mapping[str, DeviceHealth],
    now: float,
) -> PartitionHealth:
    """The partition once a restart serving `devices` has succeeded."""
    out = tuple(d for d in full if d not in devices)
    return PartitionHealth(
        view.partition,
        PartState.SERVING if tuple(devices) == tuple(full) else PartState.SHRUNK,
        now,
        tuple(devices),
        out,
        node_id,
        f"without {_detail(health, out)}" if out else "",
        head=view.head,
    )


def restart_failed(view: PartitionHealth, full: Sequence[str], error: str, now: float) -> PartitionHealth:
    """The partition after a restart that failed: stopped, tried again later."""
    return _stopped(view, full, now, f"restart failed: {error}"[:1000])


def _stopped(view: PartitionHealth, full: Sequence[str], now: float, detail: str) -> PartitionHealth:
    """Stopped since `now`, every device out."""
    return replace(
        view, state=PartState.STOPPED, since=now, devices=(), out=tuple(full), deadline=None, target=None, detail=detail
    )
