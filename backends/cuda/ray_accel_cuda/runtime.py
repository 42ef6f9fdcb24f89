"""The CUDA runtime: NCCL, and the GPUs of a raylet shared by its workers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Final

from ray_accel.core.visibility import format_mask
from ray_accel.plugins.interface import Runtime
from ray_accel.plugins.runtime import WorkerSlot, rank_env, raylet_union

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
# What every process using these GPUs needs, workers of any task included
# (`DevicePlugin.process_env`): masks are NVML indexes, in PCI bus order, and
# CUDA numbers devices fastest-first unless told to use that order.
PROCESS_ENV: Final[Mapping[str, str]] = MappingProxyType({"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})


class CudaRuntime(Runtime):
    def __init__(self, collective: str = "nccl") -> None:
        self._collective = collective

    def collective_backend(self) -> str:
        return self._collective

    def worker_env(self, worker: WorkerSlot, job: Sequence[WorkerSlot]) -> dict[str, str]:
        # The workers of one raylet share its GPUs (NCCL peer access between
        # them); each trains on cuda:<index of its own first GPU in that list>.
        env = rank_env(worker.rank)
        env[VISIBLE_ENV] = format_mask(raylet_union(worker, job))
        # Async error handling is Ray's own NCCL default.
        env.update({**PROCESS_ENV, "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"})
        return env
