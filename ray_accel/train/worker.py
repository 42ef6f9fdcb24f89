"""The parts of the training backend that run inside each training worker."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ray_accel.bridge.managers import SPEC_ENV, specs_from_env
from ray_accel.core.errors import InputError
from ray_accel.core.hosts import HostId, this_host_name
from ray_accel.core.visibility import VisibilityError, parse_visible_ids
from ray_accel.hooks.config import PROTECTED_ENV_VARS, Workload, WorkloadDenied, WorkloadRetry
from ray_accel.hooks.ledger import HookFactory, reconcile
from ray_accel.hooks.run import HookRun
from ray_accel.partition.labels import PARTITION_LABEL
from ray_accel.plugins.interface import DevicePlugin
from ray_accel.plugins.runtime import RANK_ENV_VARS, RankInfo, WorkerSlot, own_ids_env, rank_env
from ray_accel.train.context import TrainContext, get_context, set_context

log = logging.getLogger(__name__)


@dataclass
class _WorkerState:
    """What this training worker process holds between the backend's calls
    (Ray Train runs them in the same process, one run at a time)."""

    hooks: HookRun | None = None  # the hooks of the current workload, after pre_create
    retry: str | None = None  # a hook's retry request, raised when training starts
    group: bool = False  # a process group of ours is up
    discovered: bool = False  # discovery ran (its answer may be None: no backend)
    plugin: DevicePlugin | None = None


_state = _WorkerState()


def _plugin() -> DevicePlugin | None:
    """This worker's accelerator plugin (discovery runs once per process)."""
    if not _state.discovered:
        from ray_accel.plugins.inventory import discover

        try:
            _state.plugin = discover().primary
        except Exception as e:
            log.warning("ray-accel: discovery failed in a training worker: %s", e)
        _state.discovered = True
    return _state.plugin


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
        "collective": plugin.runtime.collective_backend() if plugin is not None and plugin.runtime and ids else "gloo",
        "pid": os.getpid(),
        "host": HostId(this_host_name(), ray.util.get_node_ip_address()).key,
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


def _slot(raw: dict[str, Any]) -> WorkerSlot:
    return WorkerSlot(rank=RankInfo(**raw["rank"]), raylet=raw["raylet"], own_ids=tuple(raw["own_ids"]))


def _visible(value: str | None) -> tuple[str, ...]:
    """A mask as the list of ids it names (ranges expanded; UUIDs kept)."""
    if not value:
        return ()
    try:
        return tuple(str(i) for i in parse_visible_ids(value) or [])
    except VisibilityError:
        return tuple(t.strip() for t in value.split(","))


def worker_env(setup: dict[str, Any], plugin: DevicePlugin | None) -> dict[str, str]:
    """This worker's environment: the backend's runtime decides from the whole
    job; without one, rank variables and exactly its own ids."""
    job = [_slot(w) for w in setup["job"]]
    me = job[setup["index"]]
    runtime = plugin.runtime if plugin is not None and setup["env"] == plugin.visible_ids_env else None
    if runtime is not None:
        env = runtime.worker_env(me, job)
    elif setup["env"]:
        env = own_ids_env(setup["env"], me)
    else:
        env = rank_env(me.rank)
    if setup["backend"] == "xla":
        env.setdefault("PJRT_DEVICE", "CPU")  # CPU hosts: PJRT on CPU
        if env["PJRT_DEVICE"] != "CPU":
            check_one_device_per_process(job)
    return env


def check_one_device_per_process(job: Sequence[WorkerSlot]) -> None:
    """The `xla` group on a real PJRT device needs one device per process.

    torch-xla 2.9 outside SPMD compiles every graph for all the job's devices
    (num_replicas = the client's global device count) but a process runs on
    its first device only (torch_xla.py:19-49); only xmp.spawn runs a thread
    per device (_internal/pjrt.py:44-80). A worker holding two NeuronCores
    leaves a replica that never runs and the collectives wait for it. SPMD
    drives many cores from one process but refuses the `xla` group
    (distributed/xla_backend.py:12-15)."""
    many = [w for w in job if len(w.own_ids) != 1]
    if many:
        w = many[0]
        raise InputError(
            f"backend 'xla' runs one device per process, but worker rank {w.rank.world_rank} holds "
            f"{len(w.own_ids)} ({', '.join(w.own_ids) or 'none'}): ask for 1 per worker "
            "(e.g. resources_per_worker={'neuron_cores': 1}), or for SPMD over several cores use backend='gloo'"
        )


# The collectives' own variables, protected whichever family the job runs on
# (a hook could otherwise steer PJRT or torch-xla even where the runtime left
# them unset): PJRT's process layout and device (torch_xla/_internal/neuron.py
# reads NEURON_PJRT_*, NEURON_RT_ROOT_COMM_ID, PJRT_LOCAL_PROCESS_* at 16-89;
# torch_xla/_internal/pjrt.py:100-119 sets PJRT_LOCAL_PROCESS_*), and
# TORCHELASTIC_RUN_ID, whose presence alone makes torch-xla remap every
# process's NeuronCores to cores[LOCAL_RANK] (neuron.py:58-81,
# rendezvous.py:26-32).
COLLECTIVE_ENV_VARS = frozenset(
    {
        "PJRT_DEVICE",
        "PJRT_LOCAL_PROCESS_RANK",
        "PJRT_LOCAL_PROCESS_COUNT",
        "NEURON_RT_ROOT_COMM_ID",
        "NEURON_PJRT_PROCESS_INDEX",
        "NEURON_PJRT_PROCESSES_NUM_DEVICES",
        "NEURON_PJRT_WORLD_SIZE",
        "TORCHELASTIC_RUN_ID",
    }
)
# Ray's switch that stops it writing a visibility variable
# (ray/_private/accelerators/nvidia_gpu.py, neuron.py, amd_gpu.py: the
# RAY_EXPERIMENTAL_NOSET_<variable> pattern).
NOSET_PREFIX = "RAY_EXPERIMENTAL_NOSET_"
VISIBLE_ENV_VARS = frozenset({"CUDA_VISIBLE_DEVICES", "NEURON_RT_VISIBLE_CORES", "HIP_VISIBLE_DEVICES"})


def protected_vars(env: dict[str, str], visible_env: str | None) -> frozenset[str]:
    """What no hook may set: every variable the runtime set, the visibility
    variable and Ray's switch for it, the rank and collective variables."""
    visible = VISIBLE_ENV_VARS | ({visible_env} if visible_env else set())
    return (
        frozenset(env)
        | RANK_ENV_VARS
        | COLLECTIVE_ENV_VARS
        | PROTECTED_ENV_VARS
        | visible
        | {NOSET_PREFIX + v for v in visible}
    )


def prepare(setup: dict[str, Any], factories: Sequence[HookFactory]) -> dict[str, Any]:
    """Reconcile crashed workloads, set the environment, run pre_create."""
    reconciled = reconcile(setup["run_id"], factories)
    me = _slot(setup["job"][setup["index"]])
    rank = me.rank
    env = worker_env(setup, _plugin())
    os.environ.update(env)
    set_context(
        TrainContext(
            world_rank=rank.world_rank,
            world_size=rank.world_size,
            local_rank=rank.local_rank,
            local_world_size=rank.local_world_size,
            node_rank=rank.node_rank,
            node_id=me.raylet,
            partition=setup["partition"],
            backend=setup["backend"],
            visible_ids=_visible(env.get(setup["env"])) if setup["env"] else (),
            own_ids=me.own_ids,
            device_family=setup["family"],
        )
    )
    _state.retry = None
    workload = Workload(
        workload_id=f"{setup['run_id']}-rank{rank.world_rank}-pid{os.getpid()}",
        partition=setup["partition"] or me.raylet[:12],
        visible_ids=tuple(int(v) for v in me.own_ids if v.isdigit()),
        pid=os.getpid(),
        labels={"run_id": setup["run_id"], "world_rank": str(rank.world_rank)},
    )
    hooks = HookRun(setup["run_id"], workload, factories)
    try:
        hooks.pre_create(protected=protected_vars(env, setup["env"]))
    except WorkloadDenied as e:
        return {"status": "denied", "reason": str(e), "reconciled": reconciled}
    except WorkloadRetry as e:
        return {"status": "retry", "reason": str(e), "reconciled": reconciled}
    _state.hooks = hooks
    return {"status": "ok", "reconciled": reconciled, "env": {k: os.environ[k] for k in env}}


def mark_retry(reason: str) -> None:
    _state.retry = reason


def init_group(timeout_s: float) -> None:
    import torch.distributed as dist

    ctx = get_context()
    if dist.is_initialized():
        dist.destroy_process_group()
    if ctx.backend == "xla" and os.environ.get("PJRT_DEVICE") != "CPU":
        init_xla_group(ctx, timeout_s)
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
    _state.group = True


def init_xla_group(ctx: TrainContext, timeout_s: float) -> None:
    """The `xla` process group on a real PJRT device, one device per process.

    torch-xla sets the replication only under torchrun or xmp.spawn
    (_internal/pjrt.py:100-122, reached from rendezvous.py:26-32); without it
    `xr.world_size()` stays 1 and every XLA collective returns its input
    (core/xla_model.py:431-436). It is set here as `initialize_multiprocess`
    sets it (pjrt.py:121-122), without the plugin's `initialize_env`, which
    would rewrite NEURON_PJRT_PROCESS_INDEX to the local rank and remap the
    cores (_internal/neuron.py:105-112). The group's rank and size are ray-accel's
    (`env://`); PJRT must agree, or the reduce would mix up replicas."""
    import torch.distributed as dist
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.xla_backend  # registers the "xla" backend
    import torch_xla.runtime as xr

    xm.set_replication(torch_xla.device(), torch_xla.devices())
    pjrt = (xr.global_ordinal(), xr.world_size())
    if pjrt != (ctx.world_rank, ctx.world_size):
        raise RuntimeError(
            f"PJRT sees this worker as replica {pjrt[0]} of {pjrt[1]}, ray-accel as rank {ctx.world_rank} of "
            f"{ctx.world_size}: check NEURON_PJRT_PROCESS_INDEX={os.environ.get('NEURON_PJRT_PROCESS_INDEX')} and "
            f"NEURON_PJRT_PROCESSES_NUM_DEVICES={os.environ.get('NEURON_PJRT_PROCESSES_NUM_DEVICES')}"
        )
    dist.init_process_group(
        "xla",
        init_method="env://",
        rank=ctx.world_rank,
        world_size=ctx.world_size,
        timeout=timedelta(seconds=timeout_s),
    )


def post_create() -> None:
    if _state.hooks is not None:
        _state.hooks.post_create()


def shutdown(pre_terminate_timeout_s: float) -> None:
    hooks = _state.hooks
    if hooks is not None:
        hooks.pre_terminate(pre_terminate_timeout_s)
    if _state.group:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        _state.group = False
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:
            pass
    if hooks is not None:
        hooks.post_terminate()
        _state.hooks = None


def release() -> None:
    """post_terminate for a workload whose run was refused by another worker's hook."""
    hooks = _state.hooks
    if hooks is not None:
        hooks.post_terminate()
        _state.hooks = None


class WorkerTrainContext:
    """Wraps the user's training function on each worker."""

    def __enter__(self) -> WorkerTrainContext:
        if _state.retry is not None:
            raise WorkloadRetry(_state.retry)
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
