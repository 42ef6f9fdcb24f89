"""The backend plugin interface, cut at its seams.

A backend is a `DevicePlugin`: discovery and host facts for one accelerator
family on one host. It may also have the other two parts, and implements
only the ones it has:

- `Runtime`: what a training worker of this family needs (its collective,
  its environment computed from the whole job, its process group, its torch
  device);
- `Telemetry`: device samples (utilisation, memory, power, temperature, a
  count of recent health events: never a verdict), the device memory each
  process holds, and which processes hold each device;
- `HealthMonitor`: the family's health rule applied poll after poll (what
  is fatal, what makes a device healthy again), with its state kept between
  polls.

And a backend may offer an active check of one device (`DevicePlugin.check`,
run in a child process that sees that device alone:
`ray_accel.plugins.check_runner`) and a repair of one device
(`DevicePlugin.repair`); one that offers none answers `NOT_SUPPORTED`.

What ray-accel must know of a backend without probing its hardware is
declared on its class (`collectives`, `protected_env`): ray-accel reads it
from every installed backend's entry point. Vendor knowledge (variable
names, collective names and their start-up) lives in the backends; the
layers above this interface ask, and know none of it.

Every member here is used by the product; see `tests/unit/test_interface_used.py`
(which names the members still waiting for their first product caller).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta
from typing import Any, ClassVar

from ray_accel.core.checks import NOT_SUPPORTED, CheckResult, NotSupported, RepairResult
from ray_accel.core.devices import Device, HostInfo, all_core_ids
from ray_accel.core.health import HealthReport
from ray_accel.core.health_kept import KeptDevice
from ray_accel.core.samples import DeviceSample
from ray_accel.core.visibility import VisibilityError, parse_visible_ids
from ray_accel.plugins.runtime import GLOO, CollectiveChoice, WorkerSlot, check_collective, own_ids_env, rank_env
from ray_accel.plugins.traits import DeviceTraits

# Ray's switch that stops it writing a visibility variable
# (ray/_private/accelerators/nvidia_gpu.py, neuron.py, amd_gpu.py in Ray
# 2.60: the RAY_EXPERIMENTAL_NOSET_<variable> pattern).
NOSET_PREFIX = "RAY_EXPERIMENTAL_NOSET_"


def visibility_protected(visible_ids_env: str) -> frozenset[str]:
    """A visibility variable and Ray's switch for it: what no hook may set
    for a family that shows devices through `visible_ids_env`."""
    return frozenset({visible_ids_env, NOSET_PREFIX + visible_ids_env})


class Runtime(ABC):
    """The training side of a family: its collectives, what each worker sees,
    how its process group starts. Called inside the training worker."""

    @abstractmethod
    def collective_backend(self, accelerator_type: str | None) -> CollectiveChoice:
        """The collective this worker trains with under backend="auto", and
        why where that needs saying. Called in the worker, so it may depend on
        what is installed there; `accelerator_type` is its devices' type as
        discovery named it (None: not known)."""

    @abstractmethod
    def worker_env(self, worker: WorkerSlot, job: Sequence[WorkerSlot], collective: str) -> dict[str, str]:
        """`worker`'s environment, given every worker of the job in world-rank
        order and the job's collective: rank variables, what it may see, its
        collective's variables. A collective it cannot make, or a job it
        cannot run with it, is an `InputError` naming both."""

    def init_process_group(self, collective: str, world_rank: int, world_size: int, timeout_s: float) -> None:
        """Make this worker's torch.distributed group (after `worker_env` is
        in the environment). By default torch's own start-up from the rank
        variables (`env://`); a family with a start-up of its own overrides it."""
        import torch.distributed as dist

        wait = timedelta(seconds=timeout_s)
        dist.init_process_group(collective, init_method="env://", rank=world_rank, world_size=world_size, timeout=wait)

    def destroy_process_group(self) -> None:
        """Tear this worker's group down (before another is made, and at the
        end of a run), with whatever the family frees after it."""
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()

    def select_device(self, collective: str, visible_ids: Sequence[str], own_ids: Sequence[str]) -> Any:
        """This worker's torch device, made current where the family has such
        a notion; `visible_ids` as the worker's mask lists them, `own_ids` as
        Ray assigned them. Called when training starts and by
        `ray_accel.train.get_device()`. By default the CPU."""
        import torch

        return torch.device("cpu")

    def reduce_gradients(self, group: str, grads: Sequence[Any], world_size: int) -> bool:
        """Average `grads` over the job through this family's own reduce, if
        the process group (`group`, torch.distributed's name for it) has one;
        False: ray-accel reduces them through `torch.distributed.all_reduce`."""
        return False


class GlooRuntime(Runtime):
    """The runtime of a backend that has none, and of a worker with no
    backend: gloo on the CPU, each worker seeing exactly its own ids (the
    safe rule where devices may not be shared)."""

    def __init__(self, visible_ids_env: str | None = None) -> None:
        self._visible_ids_env = visible_ids_env

    def collective_backend(self, accelerator_type: str | None) -> CollectiveChoice:
        return CollectiveChoice(GLOO)

    def worker_env(self, worker: WorkerSlot, job: Sequence[WorkerSlot], collective: str) -> dict[str, str]:
        check_collective(collective, (GLOO,), "a worker without an accelerator runtime")
        if self._visible_ids_env is None:
            return rank_env(worker)
        return own_ids_env(self._visible_ids_env, worker)


class Telemetry(ABC):
    """Samples of this family's devices, and of the processes that hold them."""

    @abstractmethod
    def device_samples(self) -> list[DeviceSample]:
        """One sample per device still present; a device that vanished is absent."""

    def process_device_memory(self, pids: Collection[int]) -> Mapping[int, Mapping[str, int]]:
        """Device id -> bytes held, for each of `pids` that holds any (one call
        per collection, so a backend can answer from one query per device).
        Read only: processes that hold the same may share one mapping."""
        return {}

    def device_holders(self) -> dict[str, tuple[int, ...]]:
        """Device id -> PIDs the vendor tool says hold it (every process on
        the host, not only Ray's: the metrics layer names the ones that are not
        workers of the raylet that owns the device). `{}`: unknown or none."""
        return {}

    def use_host_readings(self, readings: Mapping[str, object] | None, why: str | None) -> None:
        """The health decider's latest `HealthMonitor.readings()` for the next
        samples (None: none, `why` says why): a family whose host-wide source
        the decider owns samples from these instead of starting its own, and
        without them says that source's values are unknown."""
        return None


class HealthMonitor(ABC):
    """A family's health rule over its health sources, poll after poll.

    Constructing one is cheap; polling reads only the health sources, never
    full discovery. The monitor keeps the rule's state between polls (the
    last counter readings, open faults, clean polls counted), so one monitor
    serves one poller. Thread-safe: `clear` may come while a poll runs."""

    @abstractmethod
    def poll(self) -> HealthReport:
        """Read the sources, apply the family's rule: every device listed at
        discovery, in index order, with its verdict; the events new in this
        poll; the sources that could not be read, with their causes."""

    @abstractmethod
    def clear(self, device_id: str) -> None:
        """A person said the device is fixed: its sticky state (what no source
        ever reports as over) is dropped; the next poll decides its state.
        A device this monitor does not know is an `InputError` naming it."""

    def readings(self) -> Mapping[str, object] | None:
        """The latest readings of the host-wide sources this monitor owns (one
        per host, since one decider per host owns the monitor), as JSON for the
        host's telemetry (`Telemetry.use_host_readings`); None: it owns none."""
        return None

    @abstractmethod
    def kept(self) -> tuple[KeptDevice, ...]:
        """What of the rule's state must outlive this monitor, per device
        (faults, counter baselines, doubts): the decider keeps it on disk."""

    @abstractmethod
    def resume(self, kept: Sequence[KeptDevice]) -> None:
        """Take back what an earlier monitor kept, before the first poll."""


class DevicePlugin(ABC):
    """One accelerator family on one host: discovery and host facts."""

    # Declared on the class, read from every installed backend without
    # constructing it or probing hardware (`ray_accel.plugins.discovery`):
    # - the collectives its runtime makes (`AcceleratorTorchConfig(backend=...)`
    #   accepts "auto", "gloo" and any installed backend's);
    collectives: ClassVar[tuple[str, ...]] = ()
    # - the variables no lifecycle hook may set, whatever this backend's
    #   workers run: its visibility variable and Ray's switch for it
    #   (`visibility_protected`), its collectives' variables.
    protected_env: ClassVar[frozenset[str]] = frozenset()

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

    @property
    def traits(self) -> DeviceTraits:
        """How the family's devices may be shared, split and attributed."""
        return DeviceTraits()

    @abstractmethod
    def probe(self) -> str | None:
        """Find the hardware; return None when present, else why not."""

    @abstractmethod
    def list_devices(self) -> tuple[Device, ...]:
        """Every device of the host, ignoring any visibility mask."""

    @abstractmethod
    def host_info(self) -> HostInfo: ...

    def parse_visible(self, value: str | None) -> list[int] | None:
        """Read this family's visibility variable into schedulable ids."""
        cores = set(all_core_ids(self.list_devices()))
        ids = parse_visible_ids(value)
        if ids is not None and cores:
            unknown = [i for i in ids if i not in cores]
            if unknown:
                raise VisibilityError(f"{self.visible_ids_env}={value!r} names {unknown[0]}, not on this host")
        return ids

    def process_env(self) -> dict[str, str]:
        """Variables every process using this family's devices needs, whatever
        it runs (a raylet, a task, an actor, a training worker): carried to the
        raylets, so their workers inherit them (e.g. a device ordering variable)."""
        return {}

    @property
    def runtime(self) -> Runtime | None:
        """The training runtime, if this backend has one (None: gloo, own ids)."""
        return None

    @property
    def telemetry(self) -> Telemetry | None:
        """Device and process samples, if this backend can take them."""
        return None

    @property
    def health(self) -> HealthMonitor | None:
        """The family's health monitor, one per plugin (it keeps state between
        polls); None: no health source, every device's health is unknown."""
        return None

    def check(self, device_id: str, timeout_s: float) -> CheckResult | NotSupported:
        """An active check of one device that no partition serves: a short
        workload on it alone, in a child process, within `timeout_s` seconds
        (a timeout is the outcome `timeout`, the child killed). Blocks until
        it ends. A device this backend does not know, or a bad `timeout_s`,
        is an `InputError` naming it. `NOT_SUPPORTED`: this backend has no
        check (nothing was checked)."""
        return NOT_SUPPORTED

    def repair(self, device_id: str) -> RepairResult | NotSupported:
        """Repair one device that no partition serves and no process holds,
        as its driver asks (a GPU reset), at most once per call; the caller
        checks it before it takes work again. A device this backend does not
        know is an `InputError` naming it. `NOT_SUPPORTED`: this backend has
        no repair (it is the operator's)."""
        return NOT_SUPPORTED
