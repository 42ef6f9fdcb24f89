"""`ray-accel jobs` and `ray-accel jobs show ID`: training jobs and their phases.

Read from the cluster-wide job store (`ray_accel.jobs.store`) of the cluster
this host's record names; like `top`, never starts a cluster ("no cluster",
exit 1). There is no `jobs scale`: Ray 2.60 offers no supported way to ask a
running elastic run for a size (docs/design.md, "Jobs").
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import click

from ray_accel.cli.host import json_option
from ray_accel.cli.output import emit
from ray_accel.cli.render import render
from ray_accel.core.errors import InputError


def read_recorded_jobs(replicas: bool = False) -> list[dict[str, Any]]:
    """Every job of the cluster this host's record names (connects as a
    driver), with why it waits where a partition of this host it ran on is
    not serving (`waiting`, from the host's health decider)."""
    from ray_accel.cli.connect import connect_to_recorded_cluster
    from ray_accel.cluster.status import status
    from ray_accel.health.view import annotate_jobs
    from ray_accel.jobs.store import read_jobs

    connect_to_recorded_cluster(status())
    return annotate_jobs(read_jobs(replicas=replicas))


def find_job(jobs: Sequence[Mapping[str, Any]], job_id: str) -> Mapping[str, Any]:
    """The job whose id (or Ray run id, or name) is `job_id`, or a unique id prefix."""
    exact = [j for j in jobs if job_id in (j["id"], j["ray_run_id"], j["name"])]
    if len(exact) == 1:
        return exact[0]
    if len(exact) > 1:
        raise InputError(f"job {job_id!r} names {len(exact)} jobs ({', '.join(j['id'] for j in exact)}): use an id")
    prefixed = [j for j in jobs if j["id"].startswith(job_id)]
    if len(prefixed) == 1 and job_id:
        return prefixed[0]
    known = ", ".join(j["id"] for j in jobs) or "none"
    raise InputError(f"no job {job_id!r} in the cluster's job store (jobs: {known})")


def _ago(at: float | None, now: float) -> str:
    return "-" if not at else f"{max(0.0, now - at):.0f}s ago"


def _size(job: Mapping[str, Any]) -> str:
    lo, hi = job["min_workers"], job["max_workers"]
    return f"{job['workers']} ({lo})" if lo == hi else f"{job['workers']} ({lo}-{hi})"


def jobs_text(payload: Mapping[str, Any], now: float | None = None) -> str:
    now = time.time() if now is None else now
    jobs = payload["jobs"]
    if not jobs:
        return "no jobs"
    return render(
        ["JOB", "NAME", "PHASE", "WORKERS", "RESTARTS", "PARTITIONS", "SUBMITTED", "SINCE"],
        [
            [
                j["id"],
                j["name"],
                j["phase"],
                _size(j),
                j["restarts"],
                ",".join(j["partitions"]) or "-",
                _ago(j["submitted_at"], now),
                _ago(j["phases"][-1]["at"] if j["phases"] else None, now),
            ]
            for j in jobs
        ],
    ) + "".join(f"\n{j['id']} waits: {j['waiting']}" for j in jobs if j.get("waiting"))


def job_text(job: Mapping[str, Any], now: float | None = None) -> str:
    now = time.time() if now is None else now
    t0 = job["submitted_at"]
    head = [
        f"job {job['id']} ({job['name']}): {job['phase']}, Ray state {job['ray_state'] or '-'}",
        f"workers: {job['workers']} now, allowed {job['min_workers']}..{job['max_workers']}; "
        f"restarts {job['restarts']}, attempts {job['attempts']}; Ray run {job['ray_run_id'] or '-'}",
        "phases: " + " -> ".join(f"{p['phase']} (+{p['at'] - t0:.1f}s)" for p in job["phases"]),
    ]
    if job.get("collective"):
        why = f" ({job['collective_reason']})" if job.get("collective_reason") else ""
        head.append(f"collective: {job['collective']}{why}")
    if job.get("detail"):
        head.append(f"detail: {job['detail']}")
    if job.get("waiting"):
        head.append(f"waits: {job['waiting']}")
    table = render(
        ["RANK", "LOCAL", "NODE", "HOST", "PARTITION", "DEVICES", "PID", "PHASE", "HISTORY"],
        [
            [
                f"{r['world_rank']}/{r['world_size']}",
                f"{r['local_rank']}/{r['local_world_size']}",
                r["node_rank"],
                r["host"],
                r["partition"],
                ",".join(r["devices"]) or "-",
                r["pid"],
                r["phase"],
                " -> ".join(p["phase"] for p in r["phases"]),
            ]
            for r in job.get("replicas", [])
        ],
    )
    return "\n".join(head) + "\n\n" + table


@click.group(invoke_without_command=True)
@json_option
@click.pass_context
def jobs(ctx: click.Context, as_json: bool) -> int:
    """Training jobs (every fit() with AcceleratorTorchConfig) and their phases."""
    if ctx.invoked_subcommand is not None:
        return 0
    return emit(as_json, {"jobs": read_recorded_jobs()}, jobs_text)


@jobs.command()
@click.argument("job_id", metavar="ID")
@json_option
def show(job_id: str, as_json: bool) -> int:
    """One job with its replicas (every worker: host, partition, ranks, devices, pid, phases)."""
    job = find_job(read_recorded_jobs(replicas=True), job_id)
    return emit(as_json, dict(job), job_text)


def top_jobs() -> list[dict[str, Any]]:
    """The jobs for `ray-accel top` (the caller is connected); none, with no store."""
    from ray_accel.health.view import annotate_jobs
    from ray_accel.jobs.store import read_jobs

    return annotate_jobs(read_jobs())


def top_jobs_text(jobs_list: Sequence[Mapping[str, Any]]) -> str:
    return jobs_text({"jobs": list(jobs_list)})
