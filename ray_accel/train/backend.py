"""`AcceleratorBackend`: the Ray Train `Backend` behind `AcceleratorTorchConfig`.

on_start, run by Ray Train's controller after the worker group starts:
1. ask every worker where it is (raylet, assigned device ids, partition);
2. ranks per raylet; each raylet's workers share the sorted union of their ids;
3. on each worker: reconcile crashed workloads, set the environment through the
   plugin's runtime (NCCL, PJRT, gloo), run pre_create hooks;
4. a denial fails `fit()` with the hook's reason; a retry request makes the
   workers fail when training starts, which Ray Train counts against
   `FailureConfig(max_failures)`;
5. the process group, then post_create.
on_shutdown: pre_terminate (bounded), process group teardown, post_terminate.
"""

from __future__ import annotations

import logging
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError
from ray.train.backend import Backend

from ray_accel.hooks.config import WorkloadDenied
from ray_accel.train import worker
from ray_accel.train.ranks import assign_ranks

log = logging.getLogger(__name__)

BACKENDS = ("auto", "nccl", "xla", "gloo")


def resolve_backend(requested: str | None, infos: list[dict[str, Any]]) -> str:
    if requested and requested != "auto":
        return requested
    found = {i["collective"] for i in infos}
    if len(found) > 1:
        raise ValueError(f"workers disagree on the collective backend ({sorted(found)}): set backend explicitly")
    return found.pop() if found else "gloo"


class AcceleratorBackend(Backend):
    # Sharing is done here, per raylet and numerically sorted, for every family.
    share_cuda_visible_devices = False

    def on_start(self, worker_group: Any, backend_config: Any) -> None:
        infos: list[dict[str, Any]] = worker_group.execute(worker.describe)
        node_ids = [i["node_id"] for i in infos]
        placements = assign_ranks(node_ids)
        backend = resolve_backend(backend_config.backend, infos)
        addr, port, comm_port = worker_group.execute_single(0, worker.address_and_ports)
        # Every worker gets the whole job: its backend's runtime decides from
        # it what this worker sees (CUDA: its raylet's GPUs; Neuron: its cores).
        job = [
            {
                "rank": {
                    "world_rank": p.world_rank,
                    "world_size": p.world_size,
                    "local_rank": p.local_rank,
                    "local_world_size": p.local_world_size,
                    "node_rank": p.node_rank,
                    "master_addr": addr,
                    "master_port": port,
                    "comm_port": comm_port,
                },
                "raylet": info["node_id"],
                "own_ids": info["ids"],
            }
            for p, info in zip(placements, infos, strict=True)
        ]
        setups = [
            {
                "run_id": backend_config.run_id,
                "index": i,
                "job": job,
                "partition": info["partition"],
                "backend": backend,
                "env": info["env"],
                "family": info["family"],
            }
            for i, info in enumerate(infos)
        ]
        hooks = list(backend_config.hooks)
        outcomes = ray.get(
            [worker_group.execute_single_async(i, worker.prepare, s, hooks) for i, s in enumerate(setups)]
        )
        denied = [o for o in outcomes if o["status"] == "denied"]
        if denied:
            worker_group.execute(worker.release)
            raise WorkloadDenied(denied[0]["reason"])
        retry = [o for o in outcomes if o["status"] == "retry"]
        if retry:
            worker_group.execute(worker.mark_retry, retry[0]["reason"])
            return
        ray.get(
            [
                worker_group.execute_single_async(i, worker.init_group, backend_config.timeout_s)
                for i in range(len(setups))
            ]
        )
        worker_group.execute(worker.post_create)

    def on_shutdown(self, worker_group: Any, backend_config: Any) -> None:
        refs = worker_group.execute_async(worker.shutdown, backend_config.pre_terminate_timeout_s)
        for ref in refs:
            try:
                ray.get(ref, timeout=backend_config.pre_terminate_timeout_s + 60)
            except (RayActorError, RayTaskError, ray.exceptions.GetTimeoutError) as e:
                # A dead worker's post_terminate runs when the next worker
                # group reconciles the ledger on that node.
                log.warning("ray-accel: a worker could not shut down cleanly: %s", e)
