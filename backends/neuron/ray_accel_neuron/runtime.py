"""The Neuron runtime: each training process sees exactly its own NeuronCores.

A NeuronCore can be opened by one process only (Neuron runtime docs), so
unlike CUDA the workers of a raylet do not share the union of their cores:
each gets its own. Two collectives train on them: `neuron` (TorchNeuron,
Neuron 2.33+, Trainium2 and Trainium3: its contract is in `torchneuron.py`)
and `xla` (PyTorch/XLA, `xla.py`); "auto" picks between them in the worker
(`stacks.py`).

For `xla`, PJRT is told how the job's cores are laid out across processes.
Which variable answers to which torch-xla 2.9 function (file:line in
torch_xla 2.9.0, identical to tag v2.9.0 of pytorch/xla):

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

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from ray_accel.core.errors import InputError
from ray_accel.core.visibility import format_visible_ids
from ray_accel.plugins.interface import Runtime, visibility_protected
from ray_accel.plugins.runtime import GLOO, CollectiveChoice, WorkerSlot, check_collective, rank_env
from ray_accel.plugins.traits import DeviceTraits, SplitOrder
from ray_accel_neuron import torchneuron
from ray_accel_neuron.stacks import Stacks, choose, stacks_here
from ray_accel_neuron.torchneuron import NEURON
from ray_accel_neuron.xla import XLA, all_reduce_mean, init_xla_group, xla_device

log = logging.getLogger(__name__)

FAMILY = "neuron"
VISIBLE_ENV = "NEURON_RT_VISIBLE_CORES"
PJRT_DEVICE_ENV = "PJRT_DEVICE"
# PJRT on the host's CPU: no NeuronCore is opened (the mock, the XLA lane).
PJRT_CPU = "CPU"
COLLECTIVES: Final = (NEURON, XLA)
EFA_CLASS = "/sys/class/infiniband"
# The kernel's EFA driver: its PCI driver name and the name it registers
# its RDMA devices under ("efa_%d"; amzn-drivers kernel/linux/efa/src/efa_main.c,
# DRV_MODULE_NAME and ib_register_device). rdma-core's udev rules may rename
# them (kernel-boot/rdma-persistent-naming.rules: "rdmap<bus>s<slot>" for a
# device of no known protocol), a name other devices can have too, so the
# driver a device is bound to decides.
EFA_DRIVER = "efa"
# libfabric on EFA, as TorchNeuron's multi-node example and Ray's
# TorchXLAConfig set it (ray/train/torch/xla/config.py, Ray 2.60).
EFA_ENV: Final[Mapping[str, str]] = MappingProxyType(
    {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1"}
)
# The collectives' own variables, protected whatever the job's collective (a
# hook could otherwise steer PJRT or torch-xla even where the runtime left
# them unset): PJRT's process layout and device (torch_xla/_internal/neuron.py
# reads NEURON_PJRT_*, NEURON_RT_ROOT_COMM_ID, PJRT_LOCAL_PROCESS_* at 16-89;
# torch_xla/_internal/pjrt.py:100-119 sets PJRT_LOCAL_PROCESS_*), and
# TORCHELASTIC_RUN_ID, whose presence alone makes torch-xla remap every
# process's NeuronCores to cores[LOCAL_RANK] (neuron.py:58-81,
# rendezvous.py:26-32).
COLLECTIVE_ENV: Final = frozenset(
    {
        PJRT_DEVICE_ENV,
        "PJRT_LOCAL_PROCESS_RANK",
        "PJRT_LOCAL_PROCESS_COUNT",
        "NEURON_RT_ROOT_COMM_ID",
        "NEURON_PJRT_PROCESS_INDEX",
        "NEURON_PJRT_PROCESSES_NUM_DEVICES",
        "NEURON_PJRT_WORLD_SIZE",
        "TORCHELASTIC_RUN_ID",
    }
)
PROTECTED_ENV: Final = visibility_protected(VISIBLE_ENV) | COLLECTIVE_ENV
# A NeuronCore belongs to one process (Neuron runtime docs), so a device is
# never shared; multi-core jobs want consecutive cores starting at a multiple
# of their size, and the torus and ring link neighbouring indexes, so
# AUTO_SPLIT cuts consecutive index blocks.
TRAITS: Final = DeviceTraits(shareable=False, split=SplitOrder.INDEX_BLOCKS)


def efa_present(root: str = EFA_CLASS) -> bool:
    """This host has an EFA device: an RDMA device (/sys/class/infiniband)
    bound to the `efa` driver, or, where its driver link cannot be read,
    under the driver's own name `efa_<n>`."""
    try:
        names = os.listdir(root)
    except OSError:
        return False
    for name in names:
        try:
            driver = os.path.basename(os.readlink(os.path.join(root, name, "device", "driver")))
        except OSError:
            driver = None
        if driver == EFA_DRIVER or (driver is None and name.startswith(EFA_DRIVER + "_")):
            return True
    return False


def one_core_per_process(job: Sequence[WorkerSlot], rule: str, ask: str) -> None:
    """Refuse a job in which a worker holds other than one core: `rule` says whose rule, `ask` what to ask for."""
    w = next((w for w in job if len(w.own_ids) != 1), None)
    if w is not None:
        raise InputError(
            f"{rule}, but worker rank {w.rank.world_rank} holds {len(w.own_ids)} "
            f"({', '.join(w.own_ids) or 'none'}): ask for 1 per worker {ask}"
        )


class NeuronRuntime(Runtime):
    """`pjrt_device`: where PJRT runs the `xla` collective (CPU: the mock and
    the XLA lane, no NeuronCore opened). `fallback`: what "auto" picks where
    TorchNeuron is not used (None: PyTorch/XLA, which must be installed; the
    mock: gloo). `probe`: what the worker has installed, looked up once.
    `efa`: whether this host has an EFA device."""

    def __init__(
        self,
        pjrt_device: str = "NEURON",
        fallback: str | None = None,
        probe: Callable[[], Stacks] = stacks_here,
        efa: Callable[[], bool] = efa_present,
    ) -> None:
        self._pjrt_device = pjrt_device
        self._fallback = fallback
        self._probe = probe
        self._efa = efa
        self._stacks: Stacks | None = None

    def stacks(self) -> Stacks:
        if self._stacks is None:
            self._stacks = self._probe()
        return self._stacks

    def collective_backend(self, accelerator_type: str | None) -> CollectiveChoice:
        return choose(accelerator_type, self.stacks(), self._fallback)

    def _check_stack(self, collective: str, job: Sequence[WorkerSlot]) -> None:
        """A collective asked for is made, or refused naming what is missing."""
        missing = {NEURON: self.stacks().torchneuron, XLA: self.stacks().xla}.get(collective)
        if missing:
            raise InputError(f"backend {collective!r} cannot be made in this training worker: {missing}")
        if collective == NEURON:
            one_core_per_process(
                job, f"backend 'neuron': {torchneuron.RULE}", "(resources_per_worker={'neuron_cores': 1})"
            )
            odd = sorted({str(w.accelerator_type) for w in job if w.accelerator_type in torchneuron.UNSUPPORTED})
            if odd:
                log.warning(
                    "ray-accel: backend 'neuron' as asked on %s: TorchNeuron supports %s only",
                    ", ".join(odd),
                    ", ".join(torchneuron.GENERATIONS),
                )
        elif collective == XLA and self._pjrt_device != PJRT_CPU:
            # torch-xla 2.9 outside SPMD compiles every graph for all the job's
            # devices (num_replicas = the client's global device count) but a
            # process runs on its first device only (torch_xla.py:19-49); only
            # xmp.spawn runs a thread per device (_internal/pjrt.py:44-80). A
            # worker holding two NeuronCores leaves a replica that never runs
            # and the collectives wait for it. SPMD drives many cores from one
            # process but refuses the `xla` group (distributed/xla_backend.py:12-15).
            one_core_per_process(
                job,
                "backend 'xla' runs one device per process",
                "(e.g. resources_per_worker={'neuron_cores': 1}), or for SPMD over several cores use backend='gloo'",
            )

    def worker_env(self, worker: WorkerSlot, job: Sequence[WorkerSlot], collective: str) -> dict[str, str]:
        check_collective(collective, (*COLLECTIVES, GLOO), "the Neuron runtime")
        self._check_stack(collective, job)
        rank = worker.rank
        if collective == NEURON:
            # Rank variables per raylet, the worker's one core, rank 0's
            # rendezvous; no PJRT variable (torchneuron.py).
            env = {
                **rank_env(worker),
                VISIBLE_ENV: str(int(worker.own_ids[0])),
                "NEURON_RT_ROOT_COMM_ID": f"{worker.master_addr}:{worker.root_comm_port}",
            }
            return {**env, **EFA_ENV} if self._efa() else env
        by_rank = sorted(job, key=lambda w: w.rank.world_rank)
        env = rank_env(worker)
        # The runtime accepts ranges; a worker's own cores are one range when
        # Ray granted a contiguous block.
        env[VISIBLE_ENV] = format_visible_ids((int(i) for i in worker.own_ids), "ranges")
        env.update(
            {
                PJRT_DEVICE_ENV: self._pjrt_device,
                "NEURON_RT_ROOT_COMM_ID": f"{worker.master_addr}:{worker.root_comm_port}",
                "NEURON_PJRT_PROCESS_INDEX": str(rank.world_rank),
                "NEURON_PJRT_PROCESSES_NUM_DEVICES": ",".join(str(len(w.own_ids)) for w in by_rank),
                "PJRT_LOCAL_PROCESS_RANK": str(rank.local_rank),
                "PJRT_LOCAL_PROCESS_COUNT": str(rank.local_world_size),
            }
        )
        if self._efa():
            env.update(EFA_ENV)
        return env

    def init_process_group(self, collective: str, world_rank: int, world_size: int, timeout_s: float) -> None:
        if collective == XLA and os.environ.get(PJRT_DEVICE_ENV) != PJRT_CPU:
            init_xla_group(world_rank, world_size, timeout_s)
            return
        # On PJRT CPU, XLA collectives across processes silently return the
        # local value, so reductions go through gloo instead.
        super().init_process_group(GLOO if collective == XLA else collective, world_rank, world_size, timeout_s)

    def select_device(self, collective: str, visible_ids: Sequence[str], own_ids: Sequence[str]) -> Any:
        if collective == NEURON:
            # TorchNeuron numbers the process's device by the LOCAL_RANK
            # worker_env set; naming it starts no runtime.
            return torchneuron.device(os.environ.get("LOCAL_RANK"))
        # The XLA device, also on PJRT CPU (the tensors are XLA's; the group is gloo).
        return xla_device() if collective == XLA else super().select_device(collective, visible_ids, own_ids)

    def reduce_gradients(self, group: str, grads: Sequence[Any], world_size: int) -> bool:
        if group != XLA:
            return False
        all_reduce_mean(grads, world_size)
        return True
