"""The cluster-wide job store: one detached, named actor (`jobs` in the
`ray-accel` namespace) that folds job events into `JobRecord`s and exports
the gauge `accel_job_phase` (served as `ray_accel_job_phase`: Ray's recorder
puts `ray_` before every `ray.util.metrics` name).

Events come from Ray Train's controller process (our controller callback and
the backend's `on_start`, which Ray Train runs there), sent fire-and-forget.
The actor is synchronous and single-threaded on purpose: only such an actor
runs one submitter's calls in the order they were sent (Ray's "Actor Task
Execution Order", docs.ray.io ray-core/actors/task-orders); a threaded one
(max_concurrency > 1) may run them in any order, and a RESTARTING applied
after the SCHEDULING that followed it showed a restart as Pending, then
Restarting (seen in CI). The gauge refresh runs on a thread of its own. Any driver on any host reads the store
with `read_jobs()`; readers never create it.

The store lives on the head raylet (Ray's `node:__internal_head__` marker
resource, a sliver of it): the one raylet ray-accel's health decider never
restarts, so a partition drained and restarted without a bad device does not
take the jobs' history with it (the store would start again empty).

A gauge value is dropped by Ray's recorder when not set for a while (twice
the report interval), so the store sets every job's gauge again on a timer.
While a job is not terminal the store also checks that the controller actor
that sent its events is alive; one that died silently makes the job Unknown.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ray_accel.jobs.model import LOST, Event, EventData, JobRecord, Submitted, apply_event, gauge_rows

log = logging.getLogger(__name__)

NAMESPACE = "ray-accel"
STORE_NAME = "jobs"
GAUGE_NAME = "accel_job_phase"
GAUGE_TAGS = ("job_id", "name", "phase")
JOBS_MAX = 500  # finished jobs beyond this are forgotten, oldest first
REFRESH_S = 5.0
# Ray's resource that only the head raylet has (1 of it): asking for a
# sliver places an actor there, as Ray's own docs do for the head.
HEAD_RESOURCE = "node:__internal_head__"
HEAD_SHARE = 0.001


class JobStore:
    """The actor's body (plain class so it can be tested without Ray)."""

    def __init__(self, gauge: Any = None) -> None:
        self.jobs: dict[str, JobRecord] = {}
        self.controllers: dict[str, str] = {}  # job id -> controller actor id
        self.gauge = gauge
        self.lock = threading.Lock()

    def record(self, event: Event) -> None:
        with self.lock:
            self.jobs[event.job_id] = apply_event(self.jobs.get(event.job_id), event)
            if isinstance(event.data, Submitted) and event.data.controller:
                self.controllers[event.job_id] = event.data.controller
            if len(self.jobs) > JOBS_MAX:
                done = sorted((j for j in self.jobs.values() if j.terminal), key=lambda j: j.submitted_at)
                for j in done[: len(self.jobs) - JOBS_MAX]:
                    del self.jobs[j.id]
                    self.controllers.pop(j.id, None)
        self.export()

    def list(self) -> list[JobRecord]:
        with self.lock:
            return sorted(self.jobs.values(), key=lambda j: (j.submitted_at, j.id))

    def export(self) -> None:
        if self.gauge is None:
            return
        with self.lock:
            rows = gauge_rows(list(self.jobs.values()))
        for value, tags in rows:
            self.gauge.set(value, tags=tags)

    def watched(self) -> dict[str, str]:
        """Controllers of the jobs not yet terminal."""
        with self.lock:
            return {j: a for j, a in self.controllers.items() if j in self.jobs and not self.jobs[j].terminal}


class _StoreActor(JobStore):
    def __init__(self) -> None:
        from ray.util.metrics import Gauge

        super().__init__(Gauge(GAUGE_NAME, "1 for a job's current phase, 0 for the others", GAUGE_TAGS))
        threading.Thread(target=self._loop, daemon=True, name="ray-accel-jobs").start()

    def _loop(self) -> None:
        while True:
            time.sleep(REFRESH_S)
            try:
                for job_id, actor_id in self.watched().items():
                    if controller_dead(actor_id):
                        self.record(Event(LOST, job_id, time.time()))
                self.export()
            except Exception as e:  # the store must outlive a bad reading
                log.warning("ray-accel jobs store: %s", e)


def controller_dead(actor_id: str) -> bool:
    """True only when the GCS says the actor is DEAD (any doubt: alive)."""
    try:
        from ray.util.state import get_actor

        info = get_actor(actor_id, timeout=5)
    except Exception:
        return False
    return info is not None and getattr(info, "state", "") == "DEAD"


def store(create: bool = True) -> Any:
    """The store actor's handle; None when it does not exist and not `create`."""
    import ray

    try:
        return ray.get_actor(STORE_NAME, namespace=NAMESPACE)
    except ValueError:
        if not create:
            return None
    actor = ray.remote(_StoreActor).options(
        name=STORE_NAME,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,
        resources={HEAD_RESOURCE: HEAD_SHARE},  # on the head raylet: see the module doc
        max_concurrency=1,  # in-order events: see the module doc
        max_restarts=-1,
        # Never inside the caller's placement group: the store is often first
        # made from a training worker or trainer (Ray Train V1 captures child
        # actors in its group), and Ray kills an actor of a group when the
        # group is removed; a detached actor then restarts into the removed
        # group forever ("restarting"). Ray 2.60 warns of exactly this
        # (ray/actor.py, "restartable detached actor with a placement group").
        scheduling_strategy="DEFAULT",
    )
    return actor.remote()


def send(kind: str, job_id: str, data: EventData, at: float | None = None, wait_s: float = 0.0) -> None:
    """Record one event; wait up to `wait_s` for the store to have it (the
    last events of a run: Ray Train may end the controller process right
    after). A store that cannot be reached never fails the training run
    (its phases are then incomplete, logged)."""
    import ray

    if not ray.is_initialized():
        # Never start or join a cluster to record an event: `ray.get_actor`
        # would auto-initialise Ray (a new local cluster, or the latest one
        # `ray start` made on this machine). Ray Train's controller is always
        # connected; a caller that is not has no job to record.
        log.warning("ray-accel: job %s event %s not recorded: Ray is not initialised here", job_id, kind)
        return
    try:
        ref = store().record.remote(Event(kind, job_id, at or time.time(), data))
        if wait_s > 0:
            ray.get(ref, timeout=wait_s)
    except Exception as e:
        log.warning("ray-accel: job %s event %s not recorded: %s", job_id, kind, e)


def read_jobs(timeout_s: float = 30.0) -> list[JobRecord]:
    """Every job in the store, oldest first (the caller is connected)."""
    import ray

    handle = store(create=False)
    if handle is None:
        return []
    return list(ray.get(handle.list.remote(), timeout=timeout_s))
