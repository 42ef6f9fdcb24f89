"""Training inside partitions: `TorchTrainer(..., torch_config=AcceleratorTorchConfig())`."""

from __future__ import annotations

from typing import Any

from ray_accel.plugins.runtime import GLOO
from ray_accel.train.context import TrainContext, get_context

__all__ = ["AcceleratorTorchConfig", "TrainContext", "get_context", "get_device", "sync_gradients"]


def __getattr__(name: str) -> Any:
    # The config imports Ray Train; keep `ray_accel.train.get_context` light.
    if name == "AcceleratorTorchConfig":
        from ray_accel.train.config import AcceleratorTorchConfig

        return AcceleratorTorchConfig
    raise AttributeError(name)


def get_device() -> Any:
    """The torch device of this worker, as its backend's runtime chooses it
    for the job's collective (its GPU, its XLA device, or the CPU)."""
    from ray_accel.train.worker import device

    return device()


def sync_gradients(model: Any) -> None:
    """Average the gradients of `model` over all workers, through whatever
    process group the job has.

    - a group whose backend has a reduce of its own (the runtime that made
      it says so: `Runtime.reduce_gradients`, e.g. one fused XLA all-reduce
      of XLA tensors);
    - gloo with gradients off the CPU (XLA tensors on PJRT CPU, where XLA
      collectives across processes return the local value and gloo ignores
      XLA tensors without an error): CPU copies through gloo;
    - otherwise `dist.all_reduce` in place.
    """
    import torch.distributed as dist

    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return
    world = dist.get_world_size()
    group = dist.get_backend()
    if group != GLOO:
        from ray_accel.train.worker import runtime

        if runtime().reduce_gradients(group, grads, world):
            return
    for g in grads:
        if group == GLOO and g.device.type != "cpu":
            copy = g.detach().cpu()
            dist.all_reduce(copy)
            g.copy_((copy / world).to(g.device))
        else:
            dist.all_reduce(g)
            g /= world
