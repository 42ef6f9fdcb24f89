"""Ray Train V2's internals that ray-accel reaches (Ray 2.60): the
controller's `ControllerCallback` (a DeveloperAPI,
ray/train/v2/_internal/execution/callback.py), each worker's process-global
`TrainContext` and its frozen `DistributedContext`
(execution/context.py `get_train_context`), and the controller's `Worker`
objects (worker_group/worker_group.py `get_workers`, worker.py
`Worker.distributed_context`).

A part that is not there raises `RayApiMissing`; an exception Ray raises
while a part that is there is read or changed reaches the caller as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ray_accel.rayapi.feature import attr, method, missing, module

CONTEXT = "ray.train.v2._internal.execution.context"
CALLBACK = "ray.train.v2._internal.execution.callback"
RANK_FIELDS = ("world_rank", "world_size", "local_rank", "local_world_size", "node_rank")


def controller_callback_base() -> type:
    """Ray Train V2's `ControllerCallback` class."""
    base: type = attr(module(CALLBACK), "ControllerCallback", CALLBACK)
    return base


def _rank_context(owner: Any, where: str) -> Any:
    """`owner.distributed_context`, a dataclass with every rank field."""
    value: Any = getattr(owner, "distributed_context", None)
    is_value = dataclasses.is_dataclass(value) and not isinstance(value, type)
    if not is_value or not set(RANK_FIELDS) <= {f.name for f in dataclasses.fields(value)}:
        raise missing(f"{where} holds no distributed_context with fields {', '.join(RANK_FIELDS)}")
    return value


def replace_worker_ranks(values: Mapping[str, int]) -> None:
    """Replace rank fields in this worker's Train context (what
    `ray.train.get_context()` reads)."""
    context = attr(module(CONTEXT), "get_train_context", CONTEXT)()
    current = _rank_context(context, f"{CONTEXT}.TrainContext")
    context.distributed_context = dataclasses.replace(current, **dict(values))


def _controller_workers(worker_group: Any) -> list[Any]:
    return list(method(worker_group, "get_workers", f"Ray Train's worker group ({type(worker_group).__name__})")())


def controller_ranks(worker_group: Any) -> list[dict[str, int]]:
    """The ranks the controller holds for each worker of `worker_group`."""
    return [
        {k: getattr(_rank_context(w, "Ray Train's Worker"), k) for k in RANK_FIELDS}
        for w in _controller_workers(worker_group)
    ]


def replace_controller_ranks(worker_group: Any, values: Sequence[Mapping[str, int]]) -> None:
    """Replace rank fields of each worker's context on the controller (Ray's
    log line and state API read them); `values` in worker order."""
    workers = _controller_workers(worker_group)
    if len(workers) != len(values):
        raise ValueError(f"{len(values)} rank sets for a worker group of {len(workers)}")
    contexts = [_rank_context(w, "Ray Train's Worker") for w in workers]
    for w, current, v in zip(workers, contexts, values, strict=True):
        w.distributed_context = dataclasses.replace(current, **dict(v))


@dataclass(frozen=True)
class ControllerState:
    """What a `ControllerCallback` is told about the controller's new state
    (execution/controller/state.py: `TrainControllerState._state_type`, a
    `TrainControllerStateType` with `state_name` and `is_terminal`)."""

    name: str
    terminal: bool
    error: str  # the training error's text; "" when none


def controller_state(state: Any) -> ControllerState:
    """The controller's state as a value. A state without Ray 2.60's type
    record is named by its class, never terminal (the job model counts a name
    it does not know as Unknown)."""
    kind = getattr(state, "_state_type", None)
    error = getattr(state, "training_failed_error", None)
    return ControllerState(
        name=str(getattr(kind, "state_name", type(state).__name__)),
        terminal=bool(getattr(kind, "is_terminal", False)),
        error=str(error) if error else "",
    )
