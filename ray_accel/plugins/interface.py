"""The backend plugin interface, cut at its seams.

A backend is a `DevicePlugin`: discovery and node facts for one accelerator
family on one node. It may also have the other two parts, and implements
only the ones it has:

- `Runtime`: what a training worker of this family needs (its collective
  backend and its environment, computed from the whole job);
- `Telemetry`: device samples (utilisation, memory, power, temperature,
  health), the device memory each process holds, and which processes hold
  each device.

Every method here is called by the product; see `tests/unit/test_interface_used.py`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence

from ray_accel.core.devices import Device, NodeInfo, all_core_ids
from ray_accel.core.processes import ProcessTable
from ray_accel.core.samples import DeviceSample
from ray_accel.core.visibility import VisibilityError, parse_visible_ids
from ray_accel.plugins.runtime import WorkerSlot


class Runtime(ABC):
    """The training side of a family: NCCL and shared GPUs, PJRT and own cores, ..."""

    @abstractmethod
    def collective_backend(self) -> str:
        """The torch.distributed backend this family trains with."""

    @abstractmethod
    def worker_env(self, worker: WorkerSlot, job: Sequence[WorkerSlot]) -> dict[str, str]:
        """`worker`'s environment, given every worker of the job in world-rank
        order: rank variables, what it may see, its collective's variables."""


class Telemetry(ABC):
    """Samples of this family's devices, and of the processes that hold them."""

    @abstractmethod
    def device_samples(self) -> list[DeviceSample]:
        """One sample per device still present; a device that vanished is absent."""

    def process_device_memory(
        self, pids: Collection[int], table: ProcessTable | None = None
    ) -> Mapping[int, Mapping[str, int]]:
        """Device id -> bytes held, for each of `pids` that holds any (one call
        per collection, so a backend can answer from one query per device).
        Read only: processes that hold the same may share one mapping.
        `table`: the host's processes as the caller read them a moment ago,
        for a backend that must tell live processes from dead ones (the
        collector has read every stat line already; reading them again is
        most of a collection's cost)."""
        return {}

    def device_holders(self, table: ProcessTable | None = None) -> dict[str, tuple[int, ...]]:
        """Device id -> PIDs the vendor tool says hold it (every process on
        the host, not only Ray's: the metrics layer names the ones that are not
        workers of the raylet that owns the device). `{}`: unknown or none.
        `table`: as for `process_device_memory`."""
        return {}


class DevicePlugin(ABC):
    """One accelerator family on one node: discovery and node facts."""

    # Read-only properties, so a backend may answer with a class attribute or
    # (like the mock, whose family comes from its spec) compute them.
    @property
    @abstractmethod
    def name(self) -> str: ...

    @property
    @abstractmethod
    def resource_name(self) -> str: ...

    @property
    @abstractmethod
    def visible_ids_env(self) -> str: ...

    @property
    @abstractmethod
    def family(self) -> str: ...

    @abstractmethod
    def probe(self) -> str | None:
        """Find the hardware; return None when present, else why not."""

    @abstractmethod
    def list_devices(self) -> tuple[Device, ...]:
        """Every device of the node, ignoring any visibility mask."""

    @abstractmethod
    def node_info(self) -> NodeInfo: ...

    def parse_visible(self, value: str | None) -> list[int] | None:
        """Read this family's visibility variable into schedulable ids."""
        cores = set(all_core_ids(self.list_devices()))
        ids = parse_visible_ids(value)
        if ids is not None and cores:
            unknown = [i for i in ids if i not in cores]
            if unknown:
                raise VisibilityError(f"{self.visible_ids_env}={value!r} names {unknown[0]}, not on this node")
        return ids

    def process_env(self) -> dict[str, str]:
        """Variables every process using this family's devices needs, whatever
        it runs (a raylet, a task, an actor, a training worker): carried to the
        raylets, so their workers inherit them. CUDA's `CUDA_DEVICE_ORDER=PCI_BUS_ID`
        is one: masks are NVML indexes, and CUDA numbers devices fastest-first."""
        return {}

    @property
    def runtime(self) -> Runtime | None:
        """The training runtime, if this backend has one (None: gloo, own ids)."""
        return None

    @property
    def telemetry(self) -> Telemetry | None:
        """Device and process samples, if this backend can take them."""
        return None
