"""Job records from a list of job events, applied in order as the store applies them."""

from __future__ import annotations

from ray_accel.jobs.model import Event, JobRecord, apply_event


def apply_all(events: list[Event]) -> dict[str, JobRecord]:
    """Job id -> its record after `events`, in order."""
    jobs: dict[str, JobRecord] = {}
    for e in events:
        jobs[e.job_id] = apply_event(jobs.get(e.job_id), e)
    return jobs
