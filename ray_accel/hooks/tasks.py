"""Lifecycle hooks for plain Ray tasks and actors: `@with_hooks(HookClass)`.

    @ray.remote(resources={"neuron_cores": 2})
    @with_hooks(CleanupHook)
    def infer(batch): ...

A task runs pre_create and post_create before its body and pre_terminate and
post_terminate after it, whatever happens; env vars a hook returns apply to
that call only. An actor runs pre_create/post_create in its constructor and the
terminate hooks when `ray_accel_terminate()` is called, when its `__del__`
runs, or when its process exits, whichever comes first; one that is killed
outright is reconciled by the next hooked workload of the same `run_id` on
that host.

A Ray Serve deployment's class is hooked the same way (`@serve.deployment`
above `@with_hooks(...)`): Serve constructs it in each replica's actor and,
at a replica's graceful shutdown, calls its `__del__` before it kills the
actor (Serve 2.60 `serve/_private/replica.py`, `call_destructor`), so the
terminate hooks run around the class's own `__del__`, awaited where that is
a coroutine, as Serve accepts.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import os
from collections.abc import Callable
from typing import Any, TypeVar, cast

from ray_accel.hooks.config import Workload
from ray_accel.hooks.ledger import HookFactory, reconcile
from ray_accel.hooks.run import HookRun
from ray_accel.partition.plan import PARTITION_LABEL

T = TypeVar("T")


def _workload(kind: str) -> Workload:
    import ray

    ctx = ray.get_runtime_context()
    ident = ctx.get_actor_id() if kind == "actor" else ctx.get_task_id()
    labels = ctx.get_node_labels() or {}
    ids = tuple(int(i) for ids in ctx.get_accelerator_ids().values() for i in ids if str(i).isdigit())
    return Workload(f"{kind}-{ident}", labels.get(PARTITION_LABEL, ctx.get_node_id()[:12]), ids, os.getpid())


def with_hooks(
    *factories: HookFactory, run_id: str | None = None, pre_terminate_timeout_s: float = 30.0
) -> Callable[[T], T]:
    """Hooks around every call of a task, or around an actor's life.

    `run_id` names the ledger that reconciles killed workloads; by default it
    is the decorated function's or class's qualified name, so one function's
    reconcile never meets another's orphans.
    """

    def wrap(obj: T) -> T:
        rid = run_id or f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', type(obj).__name__)}"
        wrapper: Callable[..., Any] = _wrap_actor if isinstance(obj, type) else _wrap_function
        return cast(T, wrapper(obj, factories, rid, pre_terminate_timeout_s))

    return wrap


def _wrap_function(fn: Callable[..., Any], factories: tuple[HookFactory, ...], run_id: str, timeout: float) -> Any:
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        reconcile(run_id, factories)
        saved = dict(os.environ)
        hooks = HookRun(run_id, _workload("task"), factories)
        hooks.pre_create()
        try:
            hooks.post_create()
            return fn(*args, **kwargs)
        finally:
            hooks.pre_terminate(timeout)
            hooks.post_terminate()
            os.environ.clear()
            os.environ.update(saved)

    return run


def _wrap_actor(cls: type, factories: tuple[HookFactory, ...], run_id: str, timeout: float) -> type:
    original_init: Any = getattr(cls, "__init__")  # noqa: B009 - the class attribute, not an instance one

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        reconcile(run_id, factories)
        hooks = HookRun(run_id, _workload("actor"), factories)
        hooks.pre_create()
        self._ray_accel_hooks = hooks
        atexit.register(_terminate, hooks, timeout)
        hooks.post_create()
        original_init(self, *args, **kwargs)

    def ray_accel_terminate(self: Any) -> None:
        _terminate(self._ray_accel_hooks, timeout)

    # The class's own destructor runs between pre_terminate and
    # post_terminate, as a task's body runs between them.
    original_del: Any = getattr(cls, "__del__", None)

    def unfinished(self: Any) -> HookRun | None:
        # None where the constructor failed before its hooks ran, or they have ended.
        hooks: HookRun | None = vars(self).get("_ray_accel_hooks")
        return None if hooks is None or hooks.terminated else hooks

    def __del__(self: Any) -> None:
        hooks = unfinished(self)
        if hooks is not None:
            hooks.pre_terminate(timeout)
        try:
            if original_del is not None:
                original_del(self)
        finally:
            if hooks is not None:
                hooks.post_terminate()

    async def async_del(self: Any) -> None:
        hooks = unfinished(self)
        if hooks is not None:
            hooks.pre_terminate(timeout)
        try:
            await original_del(self)
        finally:
            if hooks is not None:
                hooks.post_terminate()

    destructor = async_del if inspect.iscoroutinefunction(original_del) else __del__
    attrs = {
        "__init__": __init__,
        "__del__": destructor,
        "ray_accel_terminate": ray_accel_terminate,
        "__module__": cls.__module__,
    }
    return type(cls.__name__, (cls,), attrs)


def _terminate(hooks: HookRun, timeout: float) -> None:
    if not hooks.terminated:
        hooks.pre_terminate(timeout)
        hooks.post_terminate()
