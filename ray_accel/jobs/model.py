"""Jobs, replicas and phases as values: everything here is pure.

A job is one `fit()` of a TorchTrainer with `AcceleratorTorchConfig`. Its
phase is derived from Ray Train V2's controller states
(`TrainControllerStateType`, ray/train/v2/_internal/execution/controller/
state.py:45-55 in Ray 2.60) plus the backend's own event "starting" (its
`on_start` runs once the worker group is placed, before the process group is
up, controller.py `_execute_resize_decision` then RUNNING):

| Ray Train state                          | phase                            |
|------------------------------------------|----------------------------------|
| INITIALIZING, SCHEDULING, RESCHEDULING   | Pending (Restarting after one)   |
| backend on_start (workers placed)        | Starting (Restarting after one)  |
| RUNNING                                  | Running                          |
| RESTARTING, RESIZING, PREEMPTING         | Restarting                       |
| SHUTTING_DOWN                            | unchanged                        |
| FINISHED                                 | Succeeded                        |
| ERRORED, ABORTED                         | Failed                           |
| controller gone before a terminal state  | Unknown                          |
| any other state name                     | Unknown                          |

A terminal phase never changes again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from ray_accel.core.health_state import HostHealth, PartState
from ray_accel.core.reader import dump, dump_fields
from ray_accel.plugins.runtime import Rank


class Phase(StrEnum):
    PENDING = "Pending"
    STARTING = "Starting"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


PHASES = tuple(p.value for p in Phase)
TERMINAL = frozenset({Phase.SUCCEEDED, Phase.FAILED})
# Ray's state -> ours; None keeps the current phase.
RAY_STATE_PHASE: Mapping[str, Phase | None] = {
    "INITIALIZING": Phase.PENDING,
    "SCHEDULING": Phase.PENDING,
    "RESCHEDULING": Phase.PENDING,
    "RUNNING": Phase.RUNNING,
    "RESTARTING": Phase.RESTARTING,
    "RESIZING": Phase.RESTARTING,
    "PREEMPTING": Phase.RESTARTING,
    "SHUTTING_DOWN": None,
    "FINISHED": Phase.SUCCEEDED,
    "ERRORED": Phase.FAILED,
    "ABORTED": Phase.FAILED,
}
# Event kinds, in the order one attempt sends them.
SUBMITTED = "submitted"  # the controller started: name, Ray's run id, allowed workers
STATE = "state"  # a change of Ray Train's controller state
STARTING = "starting"  # the backend's on_start: the replicas of a new attempt
LOST = "lost"  # the controller is gone and never said how the run ended
KINDS = (SUBMITTED, STATE, STARTING, LOST)


@dataclass(frozen=True)
class Transition:
    phase: Phase
    at: float  # seconds since the epoch
    reason: str = ""  # the Ray state or event that caused it


@dataclass(frozen=True, kw_only=True)
class Replica(Rank):
    """One training worker of one attempt: its ranks (per raylet) and where it runs."""

    host: str
    partition: str | None
    node_id: str
    devices: tuple[str, ...]  # the ids its visibility mask names
    pid: int
    attempt: int = 0  # set by the store when the attempt starts
    transitions: tuple[Transition, ...] = ()

    @property
    def phase(self) -> Phase:
        return self.transitions[-1].phase if self.transitions else Phase.UNKNOWN


@dataclass(frozen=True)
class Submitted:
    """The controller started a run."""

    name: str = ""
    ray_run_id: str = ""
    min_workers: int = 0
    max_workers: int = 0
    controller: str = ""  # its actor id, watched by the store


@dataclass(frozen=True)
class StateChange:
    state: str  # Ray Train's controller state
    detail: str = ""


@dataclass(frozen=True)
class Started:
    """The backend's on_start: a new attempt's replicas and its collective."""

    replicas: tuple[Replica, ...] = ()
    collective: str = ""
    collective_reason: str = ""  # why "auto" chose it, where the workers' runtimes said


EventData = Submitted | StateChange | Started | None


@dataclass(frozen=True)
class Event:
    kind: str
    job_id: str
    at: float
    data: EventData = None


@dataclass(frozen=True, kw_only=True)
class JobRecord:
    id: str  # AcceleratorTorchConfig.run_id: the same over restarts of one fit()
    name: str
    ray_run_id: str
    submitted_at: float
    min_workers: int
    max_workers: int
    transitions: tuple[Transition, ...] = ()
    restarts: int = 0
    attempts: int = 0
    replicas: tuple[Replica, ...] = ()  # the current (latest) attempt's
    retired: tuple[Replica, ...] = ()  # earlier attempts', newest last
    ray_state: str = ""
    detail: str = ""
    collective: str = ""  # the current attempt's ("" before one is placed)
    collective_reason: str = ""  # why "auto" chose it, where the workers' runtimes said

    @property
    def phase(self) -> Phase:
        return self.transitions[-1].phase if self.transitions else Phase.PENDING

    @property
    def workers(self) -> int:
        """Workers of the current attempt (0 before the first is placed)."""
        return len(self.replicas)

    @property
    def partitions(self) -> tuple[str, ...]:
        return tuple(sorted({f"{r.host}/{r.partition or r.node_id[:12]}" for r in self.replicas}))

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(sorted({r.host for r in self.replicas}))

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL


RETIRED_MAX = 64  # replicas of earlier attempts kept per job


def phase_for_state(current: Phase | None, state: str) -> Phase | None:
    """The phase after Ray Train's controller enters `state`; None: unchanged."""
    if current in TERMINAL:
        return None
    if state not in RAY_STATE_PHASE:
        return Phase.UNKNOWN
    target = RAY_STATE_PHASE[state]
    if target is Phase.PENDING and current is Phase.RESTARTING:
        return None  # a restart waits for its devices again: still restarting
    return target


def _move(job: JobRecord, phase: Phase | None, at: float, reason: str) -> JobRecord:
    """`job` in `phase` from `at` (its current replicas follow)."""
    if phase is None or (phase is job.phase and job.transitions):
        return job
    t = Transition(phase, at, reason)
    restarts = job.restarts + (1 if phase is Phase.RESTARTING and job.phase is not Phase.RESTARTING else 0)
    replicas = tuple(
        r if r.phase in TERMINAL else dataclasses.replace(r, transitions=(*r.transitions, t)) for r in job.replicas
    )
    return dataclasses.replace(job, transitions=(*job.transitions, t), restarts=restarts, replicas=replicas)


def new_job(event: Event) -> JobRecord:
    d = event.data if isinstance(event.data, Submitted) else Submitted()
    job = JobRecord(
        id=event.job_id,
        name=d.name or event.job_id,
        ray_run_id=d.ray_run_id,
        submitted_at=event.at,
        min_workers=d.min_workers,
        max_workers=d.max_workers,
    )
    return _move(job, Phase.PENDING, event.at, "submitted")


def apply_event(job: JobRecord | None, event: Event) -> JobRecord:
    """The job after `event`. A job first heard of through a later event (the
    store restarted) is created from it, with what that event says."""
    if event.kind not in KINDS:
        raise ValueError(f"unknown job event kind {event.kind!r}: expected one of {', '.join(KINDS)}")
    d = event.data
    if job is None:
        job = new_job(event if event.kind == SUBMITTED else Event(SUBMITTED, event.job_id, event.at))
        if event.kind == SUBMITTED:
            return job
    if isinstance(d, Submitted):
        return dataclasses.replace(
            job,
            name=d.name or job.name,
            ray_run_id=d.ray_run_id or job.ray_run_id,
            min_workers=d.min_workers,
            max_workers=d.max_workers,
        )
    if isinstance(d, StateChange):
        moved = _move(job, phase_for_state(job.phase, d.state), event.at, d.state)
        return dataclasses.replace(moved, ray_state=d.state, detail=d.detail or job.detail)
    if event.kind == LOST:
        # Unknown: the controller is gone and the job never reached a terminal phase.
        return job if job.terminal else _move(job, Phase.UNKNOWN, event.at, "controller gone")
    # STARTING: a new attempt's workers are placed; the previous ones retire.
    d = d if isinstance(d, Started) else Started()
    attempt = job.attempts + 1
    phase = None if job.terminal or job.phase is Phase.RESTARTING else Phase.STARTING
    start: tuple[Transition, ...] = (Transition(Phase.STARTING, event.at, "on_start"),)
    if job.phase is Phase.RESTARTING:  # a restart's replicas stay restarting until it runs
        start += (Transition(Phase.RESTARTING, event.at, "on_start"),)
    replicas = tuple(dataclasses.replace(r, attempt=attempt, transitions=start) for r in d.replicas)
    job = dataclasses.replace(
        job,
        attempts=attempt,
        replicas=(),
        retired=(*job.retired, *job.replicas)[-RETIRED_MAX:],
        collective=d.collective,
        collective_reason=d.collective_reason,
    )
    return dataclasses.replace(_move(job, phase, event.at, "on_start"), replicas=replicas)


def replica_json(r: Replica) -> object:
    row = dump_fields(r, phase=r.phase.value, phases=dump(r.transitions))
    del row["transitions"]
    return row


def job_json(job: JobRecord, *, replicas: bool = False, waiting: Mapping[str, str] | None = None) -> dict[str, object]:
    """What `ray-accel jobs --json` prints per job (`replicas`: also every
    worker; `waiting`, where given: why the job waits, by job id)."""
    out = dump_fields(
        dataclasses.replace(job, replicas=(), retired=()),
        phase=job.phase.value,
        workers=job.workers,
        partitions=list(job.partitions),
        hosts=list(job.hosts),
    )
    out["phases"] = out.pop("transitions")  # the job's fields, its replicas apart
    del out["replicas"], out["retired"]
    if replicas:
        out["replicas"] = [replica_json(r) for r in job.replicas]
        out["retired_replicas"] = [replica_json(r) for r in job.retired]
    if waiting is not None:
        out["waiting"] = waiting.get(job.id)
    return out


WAITING_PHASES = (Phase.PENDING, Phase.RESTARTING)


def job_notes(jobs: Sequence[JobRecord], health: HostHealth | None, host_key: str) -> dict[str, str]:
    """Job id -> why it waits, for a job that waits (Pending, Restarting)
    for a partition of this host that is not serving: the partition's state
    and why. Pure."""
    if health is None:
        return {}
    # A job's partitions are `<host key>/<partition>`.
    held = {f"{host_key}/{p.partition}": p for p in health.partitions if p.state is not PartState.SERVING}
    mine = {job.id: [held[k] for k in job.partitions if k in held] for job in jobs if job.phase in WAITING_PHASES}
    return {j: "; ".join(f"{p.partition} {p.state.value}: {p.detail}" for p in ps) for j, ps in mine.items() if ps}


def gauge_rows(jobs: Sequence[JobRecord]) -> list[tuple[float, dict[str, str]]]:
    """`accel_job_phase` values: per job, 1 for its phase and 0 for every other."""
    return [
        (1.0 if job.phase.value == p else 0.0, {"job_id": job.id, "name": job.name, "phase": p})
        for job in jobs
        for p in PHASES
    ]
