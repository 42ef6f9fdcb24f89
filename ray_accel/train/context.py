"""What a training worker knows about its place, as ray-accel computed it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainContext:
    world_rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    node_id: str
    partition: str | None
    backend: str  # the job's collective (gloo, or one its backends declare)
    visible_ids: tuple[str, ...]  # shared by the local workers
    own_ids: tuple[str, ...]  # assigned to this worker by Ray
    device_family: str | None
    backend_reason: str = ""  # why "auto" chose `backend`, where the runtimes said


_context: TrainContext | None = None


def set_context(ctx: TrainContext | None) -> None:
    global _context
    _context = ctx


def get_context() -> TrainContext:
    """This worker's ranks per raylet (correct when partitions share a host)."""
    if _context is None:
        raise RuntimeError("ray_accel.train.get_context() is only set inside a worker of AcceleratorTorchConfig")
    return _context
