"""The Neuron runtime: each training process sees exactly its own NeuronCores.

A NeuronCore can be opened by one process only (Neuron runtime docs), so
unlike CUDA the workers of a raylet do not share the union of their cores:
each gets its own, and PJRT is told how the job's cores are laid out across
processes. Which variable answers to which torch-xla 2.9 function (file:line
in torch_xla 2.9.0, identical to tag v2.9.0 of pytorch/xla):

- NEURON_RT_VISIBLE_CORES: the worker's own cores, a range where contiguous;
  parsed by `_internal/neuron_utils.py:28-43` (`get_visible_cores_list`:
  `<int>` or `<lo>-<hi>`, no overlap). Left alone by torch-xla as long as
  TORCHELASTIC_RUN_ID is unset: with it, `neuron.configure_pjrt_environment`
  (`_internal/neuron.py:58-81`, run at `import torch_xla` on a Neuron host)
  calls `remap_visible_cores`, which narrows a process to ONE core
  (`neuron_utils.py:46-67`) or raises. So TORCHELASTIC_RUN_ID is never set
  (Ray's V1 TorchXLAConfig sets it, ray/train/torch/xla/config.py:137) and no
  hook may set it.
- NEURON_PJRT_PROCESS_INDEX: the world rank (what `neuron.py:85` sets under
  torchrun; `neuron.initialize_env`, `neuron.py:105-112`, would set the LOCAL
  rank, which is why ray-accel never calls `pjrt.initialize_multiprocess`).
- NEURON_PJRT_PROCESSES_NUM_DEVICES: every process's true core count, in rank
  order. NEURON_PJRT_WORLD_SIZE is its alternative meaning "one core per
  process" (`neuron.py:62-68` sets it only when the list is absent), so it is
  not set: the precedence between the two inside libneuronpjrt is unknown.
- NEURON_RT_ROOT_COMM_ID: rank 0's host and a free port (otherwise
  `neuron.set_rt_root_comm_id`, `neuron.py:16-37`, picks MASTER_ADDR:62182).
- PJRT_LOCAL_PROCESS_RANK / PJRT_LOCAL_PROCESS_COUNT: the rank within the
  raylet and the raylet's worker count, read by `runtime.local_process_count`
  and `runtime.local_ordinal` (`runtime.py:96-99, 143-149`); torch-xla sets
  them itself only under torchrun or xmp.spawn (`neuron.py:72-89`,
  `pjrt.py:110-112`).
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
                "PJRT_LOCAL_PROCESS_RANK": str(rank.local_rank),
                "PJRT_LOCAL_PROCESS_COUNT": str(rank.local_world_size),
            }
        )
        if efa_present():
            env.update({"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1"})
        return env
