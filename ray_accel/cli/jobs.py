"""`ray-accel jobs` and `ray-accel jobs show ID`: training jobs and their phases.

Read from the cluster-wide job store (`ray_accel.jobs.store`) of the cluster
this host's record names; like `top`, never starts a cluster ("no cluster",
exit 1). There is no `jobs scale`: Ray 2.60 offers no supported way to ask a
running elastic run for a size (docs/design.md, "Jobs").
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import click

from ray_accel.cli.output import ago, emit, json_option
from ray_accel.cli.render import table
from ray_accel.core.errors import InputError, RayAccelError
from ray_accel.jobs.model import JobRecord, job_json, job_notes

if TYPE_CHECKING:
    from ray_accel.cluster.record import HostRecord

Waiting = Mapping[str, str] | None  # why each waiting job waits, by id (None: nothing known here)


def read_recorded_jobs() -> tuple[list[JobRecord], Waiting]:
    """Every job of the cluster this host's record names (connects as a
    driver), with why it waits where a partition of this host it ran on is
    not serving (from the host's health decider)."""
    from ray_accel.cli.connect import connect_to_recorded_cluster, leave_cluster

    record, _ = connect_to_recorded_cluster()
    try:
        return top_jobs(record)
    finally:
        leave_cluster()


def find_job(jobs: Sequence[JobRecord], job_id: str) -> JobRecord:
    """The job whose id (or Ray run id, or name) is `job_id`, or a unique id prefix."""
    exact = [j for j in jobs if job_id in (j.id, j.ray_run_id, j.name)]
    if len(exact) == 1:
        return exact[0]
    if len(exact) > 1:
        raise InputError(f"job {job_id!r} names {len(exact)} jobs ({', '.join(j.id for j in exact)}): use an id")
    prefixed = [j for j in jobs if j.id.startswith(job_id)]
    if len(prefixed) == 1 and job_id:
        return prefixed[0]
    known = ", ".join(j.id for j in jobs) or "none"
    raise InputError(f"no job {job_id!r} in the cluster's job store (jobs: {known})")


def _size(job: JobRecord) -> str:
    lo, hi = job.min_workers, job.max_workers
    return f"{job.workers} ({lo})" if lo == hi else f"{job.workers} ({lo}-{hi})"


def jobs_text(jobs: Sequence[JobRecord], waiting: Waiting = None, now: float | None = None) -> str:
    now = time.time() if now is None else now
    if not jobs:
        return "no jobs"
    return table(
        jobs,
        ("JOB", lambda j: j.id),
        ("NAME", lambda j: j.name),
        ("PHASE", lambda j: j.phase.value),
        ("WORKERS", _size),
        ("RESTARTS", lambda j: j.restarts),
        ("PARTITIONS", lambda j: ",".join(j.partitions) or "-"),
        ("SUBMITTED", lambda j: ago(j.submitted_at, now)),
        ("SINCE", lambda j: ago(j.transitions[-1].at if j.transitions else None, now)),
    ) + "".join(f"\n{j.id} waits: {w}" for j in jobs if (w := (waiting or {}).get(j.id)))


def job_text(job: JobRecord, waiting: Waiting = None, now: float | None = None) -> str:
    now = time.time() if now is None else now
    t0 = job.submitted_at
    heading = [
        f"job {job.id} ({job.name}): {job.phase.value}, Ray state {job.ray_state or '-'}",
        f"workers: {job.workers} now, allowed {job.min_workers}..{job.max_workers}; "
        f"restarts {job.restarts}, attempts {job.attempts}; Ray run {job.ray_run_id or '-'}",
        "phases: " + " -> ".join(f"{p.phase.value} (+{p.at - t0:.1f}s)" for p in job.transitions),
    ]
    if job.collective:
        why = f" ({job.collective_reason})" if job.collective_reason else ""
        heading.append(f"collective: {job.collective}{why}")
    if job.detail:
        heading.append(f"detail: {job.detail}")
    if note := (waiting or {}).get(job.id):
        heading.append(f"waits: {note}")
    replicas = table(
        job.replicas,
        ("RANK", lambda r: f"{r.world_rank}/{r.world_size}"),
        ("LOCAL", lambda r: f"{r.local_rank}/{r.local_world_size}"),
        ("NODE", lambda r: r.node_rank),
        ("HOST", lambda r: r.host),
        ("PARTITION", lambda r: r.partition),
        ("DEVICES", lambda r: ",".join(r.devices) or "-"),
        ("PID", lambda r: r.pid),
        ("PHASE", lambda r: r.phase.value),
        ("HISTORY", lambda r: " -> ".join(p.phase.value for p in r.transitions)),
    )
    return "\n".join(heading) + "\n\n" + replicas


@click.group(invoke_without_command=True)
@json_option
@click.pass_context
def jobs(ctx: click.Context, as_json: bool) -> int:
    """Training jobs (every fit() with AcceleratorTorchConfig) and their phases."""
    if ctx.invoked_subcommand is not None:
        return 0
    listed, waiting = read_recorded_jobs()
    payload = {"jobs": [job_json(j, waiting=waiting) for j in listed]}
    return emit(as_json, payload, lambda _: jobs_text(listed, waiting))


@jobs.command()
@click.argument("job_id", metavar="ID")
@json_option
def show(job_id: str, as_json: bool) -> int:
    """One job with its replicas (every worker: host, partition, ranks, devices, pid, phases)."""
    listed, waiting = read_recorded_jobs()
    job = find_job(listed, job_id)
    return emit(as_json, job_json(job, replicas=True, waiting=waiting), lambda _: job_text(job, waiting))


def top_jobs(record: HostRecord) -> tuple[list[JobRecord], Waiting]:
    """The jobs (the caller is connected to the cluster `record` names; none,
    with no store) and why each that waits does, where a partition of this
    host it ran on is not serving; None where the record has no node IP or
    its host's `health.json` cannot be read."""
    from ray_accel.cluster import statedir
    from ray_accel.cluster.host import this_host
    from ray_accel.core.health_state import read_health
    from ray_accel.jobs.store import read_jobs

    listed = read_jobs()
    try:
        health = read_health(statedir.place_of(record).directory)
    except RayAccelError:
        return listed, None
    return listed, None if record.host_ip is None else job_notes(listed, health, this_host(record.host_ip).key)
