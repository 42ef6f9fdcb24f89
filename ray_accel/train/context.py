"""What a training worker knows about its place, as ray-accel computed it."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from ray_accel.plugins.runtime import Rank


@dataclass(frozen=True, kw_only=True)
class TrainContext(Rank):
    """Its ranks (per raylet) and where it runs."""

    node_id: str
    partition: str | None
    collective: str  # the job's (gloo, or one its backends declare)
    visible_ids: tuple[str, ...]  # shared by the local workers
    own_ids: tuple[str, ...]  # assigned to this worker by Ray
    device_family: str | None
    collective_reason: str = ""  # why "auto" chose `collective`, where the runtimes said

    @property
    def backend(self) -> str:
        """The old name of `collective`, before version 0.3.0; kept for code written against it."""
        warnings.warn("TrainContext.backend is deprecated: use .collective", FutureWarning, stacklevel=2)
        return self.collective


_context: TrainContext | None = None


def set_context(ctx: TrainContext | None) -> None:
    global _context
    _context = ctx


def get_context() -> TrainContext:
    """This worker's ranks per raylet (correct when partitions share a host)."""
    if _context is None:
        raise RuntimeError("ray_accel.train.get_context() is only set inside a worker of AcceleratorTorchConfig")
    return _context
