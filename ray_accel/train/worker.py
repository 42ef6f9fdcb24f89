"""The parts of the training backend that run inside each training worker."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ray_accel.bridge.managers import SPEC_ENV, specs_from_env
from ray_accel.core.hosts import HostId, this_host_name
from ray_accel.core.visibility import VisibilityError, parse_visible_ids
from ray_accel.hooks.config import Workload, WorkloadDenied, WorkloadRetry
from ray_accel.hooks.ledger import HookFactory, reconcile
from ray_accel.hooks.run import HookRun, protected_env
from ray_accel.partition.plan import PARTITION_LABEL
from ray_accel.plugins.discovery import BackendUnavailable, process_backend
from ray_accel.plugins.interface import DevicePlugin, GlooRuntime, Runtime, visibility_protected
from ray_accel.plugins.runtime import GLOO, WorkerSlot
from ray_accel.train.context import TrainContext, get_context, set_context

log = logging.getLogger(__name__)


class WorkerBackendError(BackendUnavailable):
    """A training worker cannot have the backend its raylet serves: the job
    fails at start naming the backend and why, instead of training on gloo."""


@dataclass
class _WorkerState:
    """What this training worker process holds between the backend's calls
    (Ray Train runs them in the same process, one run at a time)."""

    hooks: HookRun | None = None  # the hooks of the current workload, after pre_create
    retry: str | None = None  # a hook's retry request, raised when training starts
    group: bool = False  # a process group of ours is up
    loaded: bool = False  # the backend was looked for (its answer may be None: no backend)
    plugin: DevicePlugin | None = None
    runtime: Runtime | None = None


_state = _WorkerState()


def backend() -> DevicePlugin | None:
    """This worker's accelerator backend (`process_backend`: the one its
    raylet's bridge spec names, loaded by name, else discovery's), with its
    runtime built; `WorkerBackendError` naming the backend and the reason
    when it cannot be had."""
    if not _state.loaded:
        named = specs_from_env(os.environ.get(SPEC_ENV))
        try:
            plugin = process_backend()
            if plugin is not None:
                plugin.runtime  # noqa: B018 - a backend whose runtime cannot be built fails here, at start
        except BackendUnavailable as e:
            raise WorkerBackendError(f"this training worker cannot load its raylet's backend: {e}") from e
        except Exception as e:
            if not named:
                raise WorkerBackendError(f"discovery failed in this training worker: {type(e).__name__}: {e}") from e
            raise WorkerBackendError(
                f"this training worker cannot load its raylet's backend {named[0].backend!r}: {type(e).__name__}: {e}"
            ) from e
        _state.plugin = plugin
        _state.loaded = True
    return _state.plugin


def runtime() -> Runtime:
    """This worker's training runtime: its backend's, or gloo with its own
    ids where the backend has none (or there is no backend)."""
    if _state.runtime is None:
        plugin = backend()
        own = plugin.runtime if plugin is not None else None
        _state.runtime = own if own is not None else GlooRuntime(plugin.visible_ids_env if plugin else None)
    return _state.runtime


def accelerator_type() -> str | None:
    """This worker's devices' type as discovery named it: from its raylet's
    bridge spec, or (a raylet ray-accel did not start) its backend's host facts."""
    specs = specs_from_env(os.environ.get(SPEC_ENV))
    if specs:
        return specs[0].accelerator_type
    plugin = backend()
    return plugin.host_info().accelerator_type if plugin else None


def describe_backend() -> dict[str, str | None]:
    """This worker's backend, the collective its runtime chooses under
    "auto" (here in the worker: it may depend on what is installed here) and
    why where that needs saying (logged here too); `WorkerBackendError` where
    the backend cannot be had."""
    plugin = backend()
    choice = runtime().collective_backend(accelerator_type())
    if choice.reason:
        log.warning("ray-accel: backend 'auto' chooses %r in this worker: %s", choice.collective, choice.reason)
    return {"backend": plugin.name if plugin else None, "collective": choice.collective, "reason": choice.reason}


@dataclass(frozen=True, kw_only=True)
class WorkerFacts:
    """What a worker says of itself at on_start (`describe`)."""

    node_id: str
    ip: str
    host: str
    pid: int
    partition: str | None
    family: str | None
    visible_ids_env: str | None
    accelerator_type: str | None
    own_ids: tuple[str, ...]  # as Ray assigned them
    collective: str  # what its runtime chooses under "auto" (gloo without devices)
    reason: str = ""  # why, where the runtime said


@dataclass(frozen=True)
class WorkerSetup:
    """What on_start hands each worker: the whole job and its own place in it."""

    run_id: str
    index: int  # its world rank: `job[index]` is its own slot
    job: tuple[WorkerSlot, ...]
    facts: WorkerFacts
    collective: str
    collective_reason: str = ""

    @property
    def slot(self) -> WorkerSlot:
        return self.job[self.index]


@dataclass(frozen=True)
class Prepared:
    """A worker's answer to `prepare`: ok, or a hook's denial or retry request."""

    status: str  # "ok", "denied" or "retry"
    reason: str = ""


def describe() -> WorkerFacts:
    import ray

    ctx = ray.get_runtime_context()
    specs = specs_from_env(os.environ.get(SPEC_ENV))
    plugin = backend()  # first: a worker without its backend fails the job here, at start
    accel = ctx.get_accelerator_ids()
    spec = specs[0] if specs else None
    resource = spec.resource_name if spec else (plugin.resource_name if plugin else None)
    ids = tuple(str(i) for i in accel.get(resource, [])) if resource else ()
    # A worker holding no device trains on gloo whatever its backend would pick.
    chosen = describe_backend() if ids else {"collective": GLOO}
    ip = ray.util.get_node_ip_address()
    return WorkerFacts(
        node_id=ctx.get_node_id(),
        ip=ip,
        host=HostId(this_host_name(), ip).key,
        pid=os.getpid(),
        partition=(ctx.get_node_labels() or {}).get(PARTITION_LABEL),
        family=spec.family if spec else (plugin.family if plugin else None),
        visible_ids_env=spec.visible_ids_env if spec else (plugin.visible_ids_env if plugin else None),
        accelerator_type=accelerator_type() if ids else None,
        own_ids=ids,
        collective=str(chosen["collective"]),
        reason=chosen.get("reason") or "",
    )


def address_and_ports() -> tuple[str, int, int]:
    import ray

    # Both sockets held open until both ports are known, so the two differ.
    with socket.socket() as a, socket.socket() as b:
        a.bind(("", 0))
        b.bind(("", 0))
        return ray.util.get_node_ip_address(), a.getsockname()[1], b.getsockname()[1]


def _visible(value: str | None) -> tuple[str, ...]:
    """A mask as the list of ids it names (ranges expanded; UUIDs kept)."""
    if not value:
        return ()
    try:
        return tuple(str(i) for i in parse_visible_ids(value) or [])
    except VisibilityError:
        return tuple(t.strip() for t in value.split(","))


def protected_vars(env: dict[str, str], visible_env: str | None) -> frozenset[str]:
    """What no hook may set in this worker: every variable the runtime set,
    the visibility variable and Ray's switch for it, and what `protected_env`
    names (ray-accel's own, the rank variables, every installed backend's)."""
    return protected_env(frozenset(env) | (visibility_protected(visible_env) if visible_env else frozenset()))


def prepare(setup: WorkerSetup, factories: Sequence[HookFactory]) -> Prepared:
    """Reconcile crashed workloads, set the environment, run pre_create."""
    reconcile(setup.run_id, factories)
    me, facts = setup.slot, setup.facts
    # The runtime decides from the whole job and its collective (and refuses one it cannot make).
    env = runtime().worker_env(me, setup.job, setup.collective)
    os.environ.update(env)
    set_context(
        TrainContext(
            **dataclasses.asdict(me.rank),
            node_id=me.node_id,
            partition=facts.partition,
            collective=setup.collective,
            collective_reason=setup.collective_reason,
            visible_ids=_visible(env.get(facts.visible_ids_env)) if facts.visible_ids_env else (),
            own_ids=me.own_ids,
            device_family=facts.family,
        )
    )
    _state.retry = None
    workload = Workload(
        workload_id=f"{setup.run_id}-rank{me.rank.world_rank}-pid{os.getpid()}",
        partition=facts.partition or me.node_id[:12],
        visible_ids=tuple(int(v) for v in me.own_ids if v.isdigit()),
        pid=os.getpid(),
        labels={"run_id": setup.run_id, "world_rank": str(me.rank.world_rank)},
    )
    hooks = HookRun(setup.run_id, workload, factories)
    try:
        hooks.pre_create(protected=protected_vars(env, facts.visible_ids_env))
    except WorkloadDenied as e:
        return Prepared("denied", str(e))
    except WorkloadRetry as e:
        return Prepared("retry", str(e))
    _state.hooks = hooks
    return Prepared("ok")


def mark_retry(reason: str) -> None:
    _state.retry = reason


def init_group(timeout_s: float) -> None:
    ctx = get_context()
    rt = runtime()
    rt.destroy_process_group()
    rt.init_process_group(ctx.collective, ctx.world_rank, ctx.world_size, timeout_s)
    _state.group = True


def post_create() -> None:
    if _state.hooks is not None:
        _state.hooks.post_create()


def shutdown(pre_terminate_timeout_s: float) -> None:
    if _state.hooks is not None:
        _state.hooks.pre_terminate(pre_terminate_timeout_s)
    if _state.group:
        _state.group = False
        try:
            runtime().destroy_process_group()
        except Exception as e:
            # The post_terminate hooks still run; the next group starts afresh.
            log.warning("ray-accel: the process group did not come down cleanly: %s: %s", type(e).__name__, e)
    release()


def release() -> None:
    """post_terminate for a workload whose run was refused by another worker's hook."""
    if _state.hooks is not None:
        _state.hooks.post_terminate()
        _state.hooks = None


class WorkerTrainContext:
    """Wraps the user's training function on each worker."""

    def __enter__(self) -> WorkerTrainContext:
        if _state.retry is not None:
            raise WorkloadRetry(_state.retry)
        device()  # made current where the family has such a notion
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def device() -> Any:
    """This worker's torch device, as its runtime chooses it for the job's collective."""
    ctx = get_context()
    return runtime().select_device(ctx.collective, ctx.visible_ids, ctx.own_ids)
