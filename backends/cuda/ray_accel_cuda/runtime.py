"""The CUDA runtime: NCCL, and the GPUs of a raylet shared by its workers.

Also what ray-accel must know of this family without probing it: the
collectives (`nccl`), the variables no hook may set, the device traits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from ray_accel.core.visibility import format_mask
from ray_accel.plugins.interface import Runtime, visibility_protected
from ray_accel.plugins.runtime import (
    GLOO,
    CollectiveChoice,
    WorkerSlot,
    check_collective,
    first_own_index,
    rank_env,
    raylet_union,
)
from ray_accel.plugins.traits import DeviceTraits, SplitOrder

FAMILY = "gpu"
VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
NCCL = "nccl"
COLLECTIVES: Final = (NCCL,)
# What every process using these GPUs needs, workers of any task included
# (`DevicePlugin.process_env`): masks are NVML indexes, in PCI bus order, and
# CUDA numbers devices fastest-first unless told to use that order.
PROCESS_ENV: Final[Mapping[str, str]] = MappingProxyType({"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
# No hook may change which GPUs a worker sees or how CUDA numbers them.
PROTECTED_ENV: Final = visibility_protected(VISIBLE_ENV) | frozenset(PROCESS_ENV)
# Several processes may open one GPU (no memory isolation between them);
# AUTO_SPLIT groups GPUs by NUMA node and NVLink island; a mask may name GPUs
# by UUID (`GPU-...`, `MIG-...`: the CUDA Programming Guide's
# CUDA_VISIBLE_DEVICES).
TRAITS: Final = DeviceTraits(shareable=True, split=SplitOrder.LOCALITY, opaque_ids=True)


class CudaRuntime(Runtime):
    def __init__(self, collective: str = NCCL) -> None:
        self._collective = collective

    def collective_backend(self, accelerator_type: str | None) -> CollectiveChoice:
        return CollectiveChoice(self._collective)

    def worker_env(self, worker: WorkerSlot, job: Sequence[WorkerSlot], collective: str) -> dict[str, str]:
        check_collective(collective, (*COLLECTIVES, GLOO), "the CUDA runtime")
        # The workers of one raylet share its GPUs (NCCL peer access between
        # them); each trains on cuda:<index of its own first GPU in that list>.
        env = rank_env(worker)
        env[VISIBLE_ENV] = format_mask(raylet_union(worker, job))
        # Async error handling is Ray's own NCCL default.
        env.update({**PROCESS_ENV, "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"})
        return env

    def select_device(self, collective: str, visible_ids: Sequence[str], own_ids: Sequence[str]) -> Any:
        if collective != NCCL:
            return super().select_device(collective, visible_ids, own_ids)
        import torch

        # The mask lists the raylet's GPUs; this worker's first GPU is its device.
        device = torch.device("cuda", first_own_index(visible_ids, own_ids))
        torch.cuda.set_device(device)
        return device

    def destroy_process_group(self) -> None:
        super().destroy_process_group()
        import torch

        if torch.cuda.is_available():
            # What the finished run's group cached stays on the GPUs otherwise,
            # while the worker process lives on for the next run.
            torch.cuda.empty_cache()
