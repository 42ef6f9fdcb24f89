"""Training inside partitions: `TorchTrainer(..., torch_config=AcceleratorTorchConfig())`."""

from __future__ import annotations

from typing import Any

from ray_accel.train.context import TrainContext, get_context

__all__ = ["AcceleratorTorchConfig", "TrainContext", "get_context", "get_device", "sync_gradients"]


def __getattr__(name: str) -> Any:
    # The config imports Ray Train; keep `ray_accel.train.get_context` light.
    if name == "AcceleratorTorchConfig":
        from ray_accel.train.config import AcceleratorTorchConfig

        return AcceleratorTorchConfig
    raise AttributeError(name)


def get_device() -> Any:
    """The torch device of this worker: its GPU, its XLA device, or the CPU."""
    import torch

    ctx = get_context()
    if ctx.backend == "nccl":
        from ray_accel.train.worker import device_index

        return torch.device("cuda", device_index())
    if ctx.backend == "xla":
        import torch_xla

        return torch_xla.device()
    return torch.device("cpu")


def sync_gradients(model: Any) -> None:
    """Average gradients over all workers.

    On XLA over PJRT CPU the reduction goes through the gloo group, because
    XLA collectives across processes silently return the local value there.
    """
    import torch.distributed as dist

    ctx = get_context()
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is None:
            continue
        if ctx.backend == "xla":
            g = p.grad.detach().cpu()
            dist.all_reduce(g)
            p.grad.copy_((g / world).to(p.grad.device))
        else:
            dist.all_reduce(p.grad)
            p.grad /= world
