"""A Ray Train `ScalingConfig` built from a placement policy and the cluster's
live free resources, or a refusal before any worker starts.

Ray Train V2 (Ray 2.60, `ray/train/v2/api/config.py`) takes `label_selector`
as one dict for every worker or a list of one dict per worker, whose length
must equal `max_workers` (`num_workers` when fixed), and puts each into its
placement group as that worker's bundle selector; `resources_per_worker` is
one dict for all workers. So each worker's selector names its partition (and
its host where the name is not unique), and every worker asks the same units.

The placement group takes all bundles or none, so a job that fits the view
either starts whole or waits; the view can be stale by the time the group is
made (another job may take the room first), in which case Ray Train waits as
it always does.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ray_accel.core import ray_resources
from ray_accel.core.errors import InputError
from ray_accel.placement.live import LiveView, read_view
from ray_accel.placement.model import Assignment, Job, PlacementError, apply, mark_held, refusal
from ray_accel.placement.policies import Policy, get_policy

# What the builder sets; a caller's value would contradict the placement.
OWNED = ("num_workers", "label_selector", "resources_per_worker", "use_gpu")


def new_job(
    workers: int,
    devices_per_worker: int,
    view: LiveView,
    *,
    name: str | None = None,
    cpus_per_worker: float = 0.0,
    family: str | None = None,
    resource: str | None = None,
    job_id: str | None = None,
) -> Job:
    """A `Job`; family and resource default to the cluster's, when it has one."""
    if family is None or resource is None:
        kinds = [k for k in view.families() if (family in (None, k[0])) and (resource in (None, k[1]))]
        if len(kinds) != 1:
            seen = ", ".join(f"{f}/{r}" for f, r in view.families()) or "none"
            raise InputError(
                f"cannot tell which accelerator family the job wants (live partitions offer: {seen}); "
                "name family= and resource="
            )
        family, resource = kinds[0]
    jid = job_id or uuid.uuid4().hex[:12]
    return Job(
        id=jid,
        name=name or jid,
        workers=workers,
        devices_per_worker=devices_per_worker,
        family=family,
        resource=resource,
        cpus_per_worker=cpus_per_worker,
    )


def place(
    job: Job, policy: str | Policy = "pack", view: LiveView | None = None, previous: Sequence[Assignment] = ()
) -> Assignment:
    """Where each worker of `job` goes now; `PlacementError` (naming the
    largest job of that worker size that fits) if it does not fit.
    `previous`: jobs already running, whose grant sizes help judge alignment."""
    view = view if view is not None else read_view()
    parts = view.partitions
    for a in previous:
        parts = mark_held(parts, a)
    return get_policy(policy).allocate(job, parts)


def to_scaling_config(assignment: Assignment, view: LiveView, **scaling: Any) -> Any:
    """The `ray.train.ScalingConfig` that puts each worker where `assignment` says."""
    clash = [k for k in OWNED if k in scaling]
    if clash:
        raise InputError(f"{clash[0]} is set by the placement; remove it")
    from ray.train import ScalingConfig

    if "label_selector" not in getattr(ScalingConfig, "__dataclass_fields__", {}):
        raise InputError("per-worker placement needs Ray Train V2 (RAY_TRAIN_V2_ENABLED=1, the default in 2.60)")
    job = assignment.job
    resources: dict[str, float] = {job.resource: job.devices_per_worker}
    if job.cpus_per_worker > 0:
        resources["CPU"] = job.cpus_per_worker
    selectors = [dict(view.selectors[s.key]) for s in assignment.workers]
    return ScalingConfig(
        num_workers=job.workers,
        resources_per_worker=resources,
        use_gpu=ray_resources.is_ray_gpu(job.resource),
        label_selector=selectors,
        **scaling,
    )


def scaling_config(
    workers: int,
    devices_per_worker: int,
    *,
    policy: str | Policy = "pack",
    name: str | None = None,
    cpus_per_worker: float = 0.0,
    family: str | None = None,
    resource: str | None = None,
    view: LiveView | None = None,
    **scaling: Any,
) -> Any:
    """One call: a `ScalingConfig` for `workers` workers of `devices_per_worker`
    units each, placed by `policy` on the partitions free now, or
    `PlacementError` before anything starts."""
    view = view if view is not None else read_view()
    job = new_job(
        workers, devices_per_worker, view, name=name, cpus_per_worker=cpus_per_worker, family=family, resource=resource
    )
    return to_scaling_config(place(job, policy, view), view, **scaling)


def scaling_configs(
    jobs: Sequence[Job],
    policy: str | Policy = "pack",
    view: LiveView | None = None,
    previous: Mapping[str, Assignment] | None = None,
    **scaling: Any,
) -> dict[str, tuple[Assignment, Any]]:
    """Jobs submitted at once, placed together (`optimize`): job id ->
    (assignment, `ScalingConfig`). If any does not fit, `PlacementError` for
    the first of them, and nothing is returned to start."""
    view = view if view is not None else read_view()
    placement = get_policy(policy).optimize(jobs, view.partitions, previous or {})
    if placement.waiting:
        # Judged as optimize judged it: after the jobs of this batch placed before it.
        job = next(j for j in jobs if j.id == placement.waiting[0][0])
        parts = view.partitions
        for a in placement.assignments.values():
            if a.job.id not in (previous or {}):
                parts = apply(parts, a)
        err = refusal(job, parts)
        raise PlacementError(
            f"{err} (after placing the other jobs of this batch)", job, err.largest_workers, err.largest_worker
        )
    return {jid: (a, to_scaling_config(a, view, **scaling)) for jid, a in placement.assignments.items()}
