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
    """Average the gradients of `model` over all workers, through whatever
    process group the job has.

    - an `xla` group (a real PJRT device such as Neuron): one fused XLA
      all-reduce of the gradients themselves, which are XLA tensors, scaled
      by 1/world (`torch_xla.core.xla_model.all_reduce`, core/xla_model.py:
      396-453 in torch-xla 2.9; the group takes XLA tensors only,
      distributed/xla_backend.py:78-83). Unpinned layout, as the group's own
      reduce, so that it shares a graph with `dist.all_reduce` calls;
    - gloo with gradients off the CPU (XLA tensors on PJRT CPU, where XLA
      collectives across processes return the local value and gloo ignores
      XLA tensors without an error): CPU copies through gloo;
    - nccl, or gloo on CPU tensors: `dist.all_reduce` in place.
    """
    import torch.distributed as dist

    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return
    world = dist.get_world_size()
    group = dist.get_backend()
    if group == "xla":
        import torch_xla.core.xla_model as xm

        xm.all_reduce(xm.REDUCE_SUM, grads, scale=1.0 / world, pin_layout=False)
        return
    for g in grads:
        if group == "gloo" and g.device.type != "cpu":
            copy = g.detach().cpu()
            dist.all_reduce(copy)
            g.copy_((copy / world).to(g.device))
        else:
            dist.all_reduce(g)
            g /= world
