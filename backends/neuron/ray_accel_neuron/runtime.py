"""The Neuron runtime: each training process sees exactly its own NeuronCores.

A NeuronCore can be opened by one process only (Neuron runtime docs), so
unlike CUDA the workers of a raylet do not share the union of their cores:
each gets its own, and PJRT is told how the job's cores are laid out across
processes. The variables are the ones torch-xla's Neuron PJRT path reads
(`torch_xla/_internal/neuron.py`, torch-xla 2.9): the process's index and
every process's device count in rank order, and the root of the Neuron
collectives on rank 0's host.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ray_accel.core.visibility import format_visible_ids
from ray_accel.plugins.interface import Runtime
from ray_accel.plugins.runtime import WorkerSlot, rank_env

VISIBLE_ENV = "NEURON_RT_VISIBLE_CORES"
EFA_CLASS = "/sys/class/infiniband"


def efa_present(root: str = EFA_CLASS) -> bool:
    try:
        return any(name.startswith(("efa", "rdmap")) for name in os.listdir(root))
    except OSError:
        return False


class NeuronRuntime(Runtime):
    def __init__(self, pjrt_device: str = "NEURON", collective: str = "xla") -> None:
        self._pjrt_device = pjrt_device
        self._collective = collective

    def collective_backend(self) -> str:
        return self._collective

    def worker_env(self, worker: WorkerSlot, job: Sequence[WorkerSlot]) -> dict[str, str]:
        rank = worker.rank
        by_rank = sorted(job, key=lambda w: w.rank.world_rank)
        env = rank_env(rank)
        # The runtime accepts ranges; a worker's own cores are one range when
        # Ray granted a contiguous block.
        env[VISIBLE_ENV] = format_visible_ids((int(i) for i in worker.own_ids), "ranges")
        env.update(
            {
                "PJRT_DEVICE": self._pjrt_device,
                "NEURON_RT_ROOT_COMM_ID": f"{rank.master_addr}:{rank.root_comm_port}",
                "NEURON_PJRT_PROCESS_INDEX": str(rank.world_rank),
                "NEURON_PJRT_PROCESSES_NUM_DEVICES": ",".join(str(len(w.own_ids)) for w in by_rank),
                "NEURON_PJRT_WORLD_SIZE": str(rank.world_size),
            }
        )
        if efa_present():
            env.update({"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1"})
        return env
