"""`AcceleratorBackend`: the Ray Train `Backend` behind `AcceleratorTorchConfig`.

on_start, run by Ray Train's controller after the worker group starts:
1. ask every worker where it is (raylet, assigned device ids, partition);
2. ranks per raylet (`ranks.assign_ranks`, the one place they are computed,
   on every start and restart), and Ray Train's own context made to report
   them (`raycontext`), or the run refused where it cannot be;
3. on each worker: reconcile crashed workloads, set the environment through
   its backend's runtime (which also refuses a collective it cannot make),
   run pre_create hooks;
4. a denial fails `fit()` with the hook's reason; a retry request makes the
   workers fail when training starts, which Ray Train counts against
   `FailureConfig(max_failures)`;
5. the process group (made by each worker's runtime), then post_create.
The job store hears of every attempt's replicas at on_start (`jobs`).
on_training_start: where a worker had no Ray Train context yet at on_start
(V1), check it now.
on_shutdown: pre_terminate (bounded), process group teardown, post_terminate.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError
from ray.train.backend import Backend

from ray_accel.hooks.config import WorkloadDenied
from ray_accel.plugins.discovery import declarations
from ray_accel.plugins.runtime import GLOO, WorkerSlot
from ray_accel.rayapi.feature import ray_version
from ray_accel.train import jobs, raycontext, worker
from ray_accel.train.ranks import assign_ranks
from ray_accel.train.worker import WorkerFacts

log = logging.getLogger(__name__)

AUTO = "auto"


def accepted_backends() -> tuple[str, ...]:
    """What `AcceleratorTorchConfig(backend=...)` accepts: "auto", gloo and
    every installed backend's collectives (read from their classes)."""
    declared = [c for cs in declarations().collectives.values() for c in cs]
    return (AUTO, GLOO, *dict.fromkeys(c for c in declared if c not in (AUTO, GLOO)))


def resolve_collective(requested: str | None, facts: Sequence[WorkerFacts]) -> tuple[str, str]:
    """The job's collective and why: the one asked for, or under "auto" the
    one every worker's runtime chose (gloo for a worker without devices),
    with the reasons the runtimes gave ("" where none did)."""
    if requested and requested != AUTO:
        return requested, ""
    found = {f.collective for f in facts}
    if len(found) > 1:
        raise ValueError(f"workers disagree on the collective backend ({sorted(found)}): set backend explicitly")
    collective = found.pop() if found else GLOO
    reasons = dict.fromkeys(f.reason for f in facts if f.reason)  # each once, in the workers' order
    return collective, "; ".join(reasons)


def align_ray_context(
    worker_group: Any, expected: Sequence[Mapping[str, int]], shared: Mapping[str, int], at_start: bool
) -> list[raycontext.Alignment]:
    """Make `ray.train.get_context()` in every worker report `expected`
    (world rank order), or raise `RankSeamMissing` where it cannot and the
    job's workers share an IP."""
    outcomes: list[raycontext.Alignment] = ray.get(
        [worker_group.execute_single_async(i, raycontext.align_in_worker, e) for i, e in enumerate(expected)]
    )
    if message := raycontext.refusal(outcomes, shared, ray_version(), at_start):
        raise raycontext.RankSeamMissing(message)
    for o in outcomes:
        if o.status in raycontext.REFUSING:  # not refused: no two of the job's raylets share an IP
            log.warning("ray-accel: ray.train.get_context() left as Ray computed it: %s", o.reason)
    if any(o.status == raycontext.FIXED for o in outcomes):
        view = raycontext.set_controller_view(worker_group, expected)
        if view.status != raycontext.FIXED:
            log.warning("ray-accel: Ray Train's controller keeps its own local ranks in its logs: %s", view.reason)
    return outcomes


class AcceleratorBackend(Backend):
    # Ray Train's own switch for sharing GPUs between a node's workers, off:
    # sharing is the runtime's, per raylet and numerically sorted.
    share_cuda_visible_devices = False

    def __init__(self) -> None:
        # Per worker group whose workers had no Ray Train context at on_start
        # (V1): what they must report, checked at on_training_start. Keyed by
        # the group because Ray makes a Backend a per-process singleton.
        self._recheck: dict[int, tuple[list[dict[str, int]], dict[str, int]]] = {}

    def on_start(self, worker_group: Any, backend_config: Any) -> None:
        facts: list[WorkerFacts] = worker_group.execute(worker.describe)
        ranks = assign_ranks([f.node_id for f in facts])
        expected = [dataclasses.asdict(r) for r in ranks]
        shared = raycontext.shared_ips([f.ip for f in facts], [f.node_id for f in facts])
        # The job shows the attempt's replicas and the collective chosen for them.
        collective, reason = resolve_collective(backend_config.backend, facts)
        jobs.on_start(backend_config.run_id, ranks, facts, collective, reason)
        aligned = align_ray_context(worker_group, expected, shared, at_start=False)
        if any(o.status == raycontext.PENDING for o in aligned):
            self._recheck[id(worker_group)] = (expected, shared)
        addr, port, comm_port = worker_group.execute_single(0, worker.address_and_ports)
        # Every worker gets the whole job: its backend's runtime decides from
        # it what this worker sees (its raylet's devices, or its own only).
        job = tuple(
            WorkerSlot(
                rank=rank,
                node_id=f.node_id,
                own_ids=f.own_ids,
                master_addr=addr,
                master_port=port,
                comm_port=comm_port,
                accelerator_type=f.accelerator_type,
            )
            for rank, f in zip(ranks, facts, strict=True)
        )
        hooks = list(backend_config.hooks)
        setups = [worker.WorkerSetup(backend_config.run_id, i, job, f, collective, reason) for i, f in enumerate(facts)]
        outcomes: list[worker.Prepared] = ray.get(
            [worker_group.execute_single_async(i, worker.prepare, s, hooks) for i, s in enumerate(setups)]
        )
        if denied := [o for o in outcomes if o.status == "denied"]:
            worker_group.execute(worker.release)
            raise WorkloadDenied(denied[0].reason)
        if retry := [o for o in outcomes if o.status == "retry"]:
            worker_group.execute(worker.mark_retry, retry[0].reason)
            return
        ray.get(
            [worker_group.execute_single_async(i, worker.init_group, backend_config.timeout_s) for i in range(len(job))]
        )
        worker_group.execute(worker.post_create)

    def on_training_start(self, worker_group: Any, backend_config: Any) -> None:
        if (recheck := self._recheck.pop(id(worker_group), None)) is not None:
            align_ray_context(worker_group, *recheck, at_start=True)

    def on_shutdown(self, worker_group: Any, backend_config: Any) -> None:
        refs = worker_group.execute_async(worker.shutdown, backend_config.pre_terminate_timeout_s)
        for ref in refs:
            try:
                ray.get(ref, timeout=backend_config.pre_terminate_timeout_s + 60)
            except (RayActorError, RayTaskError, ray.exceptions.GetTimeoutError) as e:
                # A dead worker's post_terminate runs when the next worker
                # group reconciles the ledger on that host.
                log.warning("ray-accel: a worker could not shut down cleanly: %s", e)
