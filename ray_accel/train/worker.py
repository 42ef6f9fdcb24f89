"""The parts of the training backend that run inside each training worker."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from ray_accel.bridge import SPEC_ENV, specs_from_env
from ray_accel.hooks import Workload, WorkloadDenied, WorkloadRetry
from ray_accel.lifecycle import HookFactory, HookRun, reconcile
from ray_accel.partition import PARTITION_LABEL
from ray_accel.plugin import DevicePlugin
from ray_accel.runtime import RankInfo, base_worker_env
from ray_accel.train.context import TrainContext, get_context, set_context

log = logging.getLogger(__name__)

_state: dict[str, Any] = {"hooks": None, "retry": None, "group": False, "plugin": None}


def _plugin() -> DevicePlugin | None:
    """This worker's accelerator plugin (discovery runs once per process)."""
    if _state["plugin"] is None:
        from ray_accel.inventory import discover

        try:
            _state["plugin"] = discover().primary or False
        except Exception as e:
            log.warning("ray-accel: discovery failed in a training worker: %s", e)
            _state["plugin"] = False
    return _state["plugin"] or None


def describe() -> dict[str, Any]:
    import ray

    ctx = ray.get_runtime_context()
    specs = specs_from_env(os.environ.get(SPEC_ENV))
    accel = ctx.get_accelerator_ids()
    spec = specs[0] if specs else None
    resource = spec.resource_name if spec else ("GPU" if accel.get("GPU") else None)
    ids = [str(i) for i in accel.get(resource, [])] if resource else []
    plugin = _plugin()
    labels = ctx.get_node_labels() or {}
    return {
        "node_id": ctx.get_node_id(),
        "ip": ray.util.get_node_ip_address(),
        "resource": resource,
        "env": spec.visible_ids_env if spec else ("CUDA_VISIBLE_DEVICES" if resource == "GPU" else None),
        "family": spec.family if spec else ("gpu" if resource == "GPU" else None),
        "ids": ids,
        "partition": labels.get(PARTITION_LABEL),
        "collective": plugin.collective_backend() if plugin is not None and ids else "gloo",
        "pid": os.getpid(),
    }


def address_and_ports() -> tuple[str, int, int]:
    import ray

    ports = []
    socks = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ray.util.get_node_ip_address(), ports[0], ports[1]


def prepare(setup: dict[str, Any], factories: Sequence[HookFactory]) -> dict[str, Any]:
    """Reconcile crashed workloads, set the environment, run pre_create."""
    reconciled = reconcile(setup["run_id"], factories)
    rank = RankInfo(
        world_rank=setup["world_rank"],
        world_size=setup["world_size"],
        local_rank=setup["local_rank"],
        local_world_size=setup["local_world_size"],
        node_rank=setup["node_rank"],
        master_addr=setup["master_addr"],
        master_port=setup["master_port"],
        comm_port=setup["comm_port"],
    )
    visible: list[str] = setup["visible_ids"]
    plugin = _plugin()
    env: dict[str, str]
    if plugin is not None and setup["env"] == plugin.visible_ids_env and all(v.isdigit() for v in visible):
        env = plugin.worker_env(rank, [int(v) for v in visible])
    else:
        env = base_worker_env(None, rank, [])
        if setup["env"]:
            env[setup["env"]] = ",".join(visible)
    if setup["backend"] == "xla":
        env.setdefault("PJRT_DEVICE", "CPU")  # the mock and CPU hosts: PJRT on CPU
    os.environ.update(env)
    set_context(
        TrainContext(
            world_rank=rank.world_rank,
            world_size=rank.world_size,
            local_rank=rank.local_rank,
            local_world_size=rank.local_world_size,
            node_rank=rank.node_rank,
            node_id=setup["node_id"],
            partition=setup["partition"],
            backend=setup["backend"],
            visible_ids=tuple(visible),
            own_ids=tuple(setup["own_ids"]),
            device_family=setup["family"],
        )
    )
    _state["retry"] = None
    workload = Workload(
        workload_id=f"{setup['run_id']}-rank{rank.world_rank}-pid{os.getpid()}",
        agent_id=setup["partition"] or setup["node_id"][:12],
        visible_ids=tuple(int(v) for v in setup["own_ids"] if v.isdigit()),
        pid=os.getpid(),
        labels={"run_id": setup["run_id"], "world_rank": str(rank.world_rank)},
    )
    hooks = HookRun(setup["run_id"], workload, factories)
    try:
        hooks.pre_create()
    except WorkloadDenied as e:
        return {"status": "denied", "reason": str(e), "reconciled": reconciled}
    except WorkloadRetry as e:
        return {"status": "retry", "reason": str(e), "reconciled": reconciled}
    _state["hooks"] = hooks
    return {"status": "ok", "reconciled": reconciled, "env": {k: os.environ[k] for k in env}}


def mark_retry(reason: str) -> None:
    _state["retry"] = reason


def init_group(timeout_s: float) -> None:
    import torch.distributed as dist

    ctx = get_context()
    if dist.is_initialized():
        dist.destroy_process_group()
    if ctx.backend == "xla" and os.environ.get("PJRT_DEVICE") != "CPU":
        import torch_xla.distributed.xla_backend  # noqa: F401  registers the "xla" backend

        dist.init_process_group("xla", init_method="xla://")
    else:
        # On PJRT CPU, XLA collectives across processes silently return the
        # local value, so reductions go through gloo instead.
        backend = "gloo" if ctx.backend == "xla" else ctx.backend
        if backend == "nccl":
            os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
        dist.init_process_group(
            backend,
            init_method="env://",
            rank=ctx.world_rank,
            world_size=ctx.world_size,
            timeout=timedelta(seconds=timeout_s),
        )
    _state["group"] = True


def post_create() -> None:
    if _state["hooks"] is not None:
        _state["hooks"].post_create()


def shutdown(pre_terminate_timeout_s: float) -> None:
    hooks: HookRun | None = _state["hooks"]
    if hooks is not None:
        hooks.pre_terminate(pre_terminate_timeout_s)
    if _state["group"]:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        _state["group"] = False
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:
            pass
    if hooks is not None:
        hooks.post_terminate()
        _state["hooks"] = None


def release() -> None:
    """post_terminate for a workload whose run was refused by another worker's hook."""
    hooks: HookRun | None = _state["hooks"]
    if hooks is not None:
        hooks.post_terminate()
        _state["hooks"] = None


class WorkerTrainContext:
    """Wraps the user's training function on each worker."""

    def __enter__(self) -> WorkerTrainContext:
        if _state["retry"] is not None:
            raise WorkloadRetry(_state["retry"])
        ctx = get_context()
        if ctx.backend == "nccl":
            import torch

            torch.cuda.set_device(device_index())
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def device_index() -> int:
    """This worker's first device, as an index into the shared visible list."""
    ctx = get_context()
    if not ctx.own_ids:
        return 0
    return list(ctx.visible_ids).index(ctx.own_ids[0])
