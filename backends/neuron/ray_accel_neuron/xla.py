"""The `xla` collective on Neuron: torch-xla 2.9's PJRT, one device per process.

File:line citations are torch_xla 2.9.0 (identical to tag v2.9.0 of
pytorch/xla).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

XLA = "xla"


def problem_here() -> str | None:
    """Why the `xla` collective cannot be made in this process; None where it
    can. Looked up without importing torch_xla, whose import configures PJRT
    on a Neuron host (_internal/neuron.py:58-81)."""
    if importlib.util.find_spec("torch_xla") is None:
        return (
            "torch-xla is not installed (PyTorch/XLA: torch-neuronx for PyTorch 2.9, last shipped in "
            "Neuron 2.31; Neuron supports it for training only up to 2.29)"
        )
    return None


def init_xla_group(world_rank: int, world_size: int, timeout_s: float) -> None:
    """The `xla` process group on a PJRT device, one device per process.

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
    if pjrt != (world_rank, world_size):
        raise RuntimeError(
            f"PJRT sees this worker as replica {pjrt[0]} of {pjrt[1]}, ray-accel as rank {world_rank} of "
            f"{world_size}: check NEURON_PJRT_PROCESS_INDEX={os.environ.get('NEURON_PJRT_PROCESS_INDEX')} and "
            f"NEURON_PJRT_PROCESSES_NUM_DEVICES={os.environ.get('NEURON_PJRT_PROCESSES_NUM_DEVICES')}"
        )
    dist.init_process_group(
        XLA,
        init_method="env://",
        rank=world_rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )


def xla_device() -> Any:
    import torch_xla

    return torch_xla.device()


def all_reduce_mean(grads: Sequence[Any], world_size: int) -> None:
    """One fused XLA all-reduce of the gradients themselves, which are XLA
    tensors, scaled by 1/world (`torch_xla.core.xla_model.all_reduce`,
    core/xla_model.py:396-453; the `xla` group takes XLA tensors only,
    distributed/xla_backend.py:78-83). Unpinned layout, as the group's own
    reduce, so that it shares a graph with `dist.all_reduce` calls."""
    import torch_xla.core.xla_model as xm

    xm.all_reduce(xm.REDUCE_SUM, list(grads), scale=1.0 / world_size, pin_layout=False)
