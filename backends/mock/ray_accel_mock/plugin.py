"""The mock DevicePlugin: a preset or TOML host, presented as Neuron or GPU."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from ray_accel_cuda import runtime as cuda
from ray_accel_cuda.visible import parse_cuda_visible
from ray_accel_neuron import runtime as neuron

from ray_accel.core import masks
from ray_accel.core.devices import Device, HostInfo, all_core_ids
from ray_accel.core.processes import alive_all
from ray_accel.core.samples import DeviceSample
from ray_accel.core.visibility import parse_visible_ids
from ray_accel.plugins.discovery import MOCK_ENV
from ray_accel.plugins.interface import DevicePlugin, Runtime, Telemetry
from ray_accel.plugins.runtime import GLOO
from ray_accel.plugins.traits import DeviceTraits
from ray_accel_mock.faults import FAULTS_ENV, Faults, load_faults
from ray_accel_mock.health import MockHealthMonitor, marked_unhealthy
from ray_accel_mock.spec import HostSpec, load_spec

__all__ = ["FAULTS_ENV", "MockHealthMonitor", "MockPlugin", "MockTelemetry"]

PROCESS_MEMORY_PER_CORE = 64 * 1024**2
# Distinct masks remembered (each a few bytes): far more than a host's workers publish.
MASK_CACHE_SIZE = 4096
# What each family it impersonates is to Ray: its resource name and visibility variable.
RESOURCES = {neuron.FAMILY: ("neuron_cores", neuron.VISIBLE_ENV)}
GPU_RESOURCE = ("GPU", cuda.VISIBLE_ENV)


@dataclass(frozen=True)
class _Holdings:
    """The records whose masks name any of this host's cores, as the mock's
    holdings: per PID its recorded start time and device memory, and per
    device its PIDs (sorted). Liveness is not in it: it is checked on every call."""

    starts: dict[int, int]
    memory: dict[int, dict[str, int]]
    holders: dict[str, tuple[int, ...]]

    @classmethod
    def of(cls, records: Mapping[int, tuple[str, int]], memory_of: Callable[[str], dict[str, int]]) -> _Holdings:
        starts: dict[int, int] = {}
        memory: dict[int, dict[str, int]] = {}
        holders: dict[str, list[int]] = {}
        for pid, (mask, start) in sorted(records.items()):
            held = memory_of(mask)
            if held:
                starts[pid], memory[pid] = start, held
                for device in held:
                    holders.setdefault(device, []).append(pid)
        return cls(starts, memory, {d: tuple(p) for d, p in sorted(holders.items())})


class MockPlugin(DevicePlugin):
    """Impersonates the family of its spec, so Ray sees `neuron_cores` or `GPU`."""

    name = "mock"
    # Whichever family it impersonates, with that family's own declarations.
    collectives = (*neuron.COLLECTIVES, *cuda.COLLECTIVES)
    protected_env = neuron.PROTECTED_ENV | cuda.PROTECTED_ENV

    def __init__(self, spec: HostSpec | None = None) -> None:
        self._spec = spec
        self._env_value = os.environ.get(MOCK_ENV, "")
        self._health: MockHealthMonitor | None = None

    @property
    def spec(self) -> HostSpec:
        if self._spec is None:
            self._spec = load_spec(self._env_value)
        return self._spec

    @property
    def family(self) -> str:
        return self.spec.family

    @property
    def resource_name(self) -> str:
        return RESOURCES.get(self.family, GPU_RESOURCE)[0]

    @property
    def visible_ids_env(self) -> str:
        return RESOURCES.get(self.family, GPU_RESOURCE)[1]

    @property
    def traits(self) -> DeviceTraits:
        # The impersonated family's traits, and its telemetry reads the masks
        # workers publish (they stand for the vendor tools' process reports).
        own = neuron.TRAITS if self.family == neuron.FAMILY else cuda.TRAITS
        return dataclasses.replace(own, reads_published_masks=True)

    def probe(self) -> str | None:
        if self._spec is None and not self._env_value:
            return f"{MOCK_ENV} is not set"
        self.spec  # noqa: B018 - loading validates the spec; a bad one raises
        return None

    def list_devices(self) -> tuple[Device, ...]:
        return self.spec.devices

    def parse_visible(self, value: str | None) -> list[int] | None:
        # A GPU host reads CUDA_VISIBLE_DEVICES as the CUDA backend does (ids,
        # UUIDs or their unique prefixes, NoDevFiles), so a Slurm-style UUID
        # mask on a mock p4d means what it would on a real one.
        if self.family != neuron.FAMILY:
            return parse_cuda_visible(value, self.spec.devices)
        return super().parse_visible(value)

    def host_info(self) -> HostInfo:
        devices = self.spec.devices
        return HostInfo(
            plugin=self.name,
            family=self.family,
            accelerator_type=self.spec.accelerator_type,
            resource_name=self.resource_name,
            visible_ids_env=self.visible_ids_env,
            device_count=len(devices),
            core_count=len(all_core_ids(devices)),
            instance_type=self.spec.instance_type,
            driver_version="mock",
            runtime_version="mock",
            attributes={"preset": self.spec.name},
        )

    def process_env(self) -> dict[str, str]:
        # As the backend it impersonates: GPU masks are NVML (PCI bus) indexes.
        return {} if self.family == neuron.FAMILY else dict(cuda.PROCESS_ENV)

    @property
    def runtime(self) -> Runtime:
        # The real runtime of the family impersonated, so training on the mock
        # exercises the same visibility rules; but on the CPU: gloo, PJRT CPU.
        if self.family == neuron.FAMILY:
            return neuron.NeuronRuntime(pjrt_device=neuron.PJRT_CPU, collective=GLOO)
        return cuda.CudaRuntime(collective=GLOO)

    @property
    def telemetry(self) -> MockTelemetry:
        return MockTelemetry(self.spec)

    @property
    def health(self) -> MockHealthMonitor:
        # One per plugin: it keeps the rule's state and the fault entries it took.
        if self._health is None:
            self._health = MockHealthMonitor(self.spec)
        return self._health


class MockTelemetry(Telemetry):
    """Deterministic samples, so tests can predict every value; faults can be
    injected while running. Processes hold devices through the masks they
    published (`ray_accel.core.masks`), which stand for what a vendor tool
    reports per process."""

    # How long one reading of the masks may serve the next process_device_memory
    # call: the two calls of one collection, not two collections.
    HANDOFF_S = 1.0

    def __init__(self, spec: HostSpec) -> None:
        self.spec = spec
        self._device_of = {c: d.id for d in spec.devices for c in d.core_ids}
        self._handoff: tuple[float, dict[int, dict[str, int]]] | None = None
        self._mask_cache: dict[str, dict[str, int]] = {}
        self._published = masks.PublishedMasks()
        self._holdings_of: tuple[object, _Holdings] | None = None

    def _faults(self) -> Faults:
        """Faults injected while running (`ray_accel_mock.faults`: the
        RAYACCEL_MOCK_FAULTS file, re-read on every sample); a file that does
        not fit is a `FaultFileError` naming what, and the samples fail with it."""
        return load_faults(os.environ.get(FAULTS_ENV), [d.id for d in self.spec.devices], self.spec.family)

    def device_samples(self) -> list[DeviceSample]:
        # Fixed functions of the index: tests can predict every value.
        faults = self._faults()
        if faults.fail:
            raise RuntimeError("mock metrics source failed (injected)")
        out = []
        for d in self.spec.devices:
            if d.id in faults.lost:
                continue
            i = d.index
            healthy = not marked_unhealthy(d)
            out.append(
                DeviceSample(
                    device_id=d.id,
                    utilization=((i * 37) % 100) / 100,
                    memory_used_bytes=d.memory_bytes * ((i * 13) % 60) // 100,
                    memory_total_bytes=d.memory_bytes,
                    power_watts=100.0 + 10 * i,
                    temperature_c=40.0 + i,
                    healthy=healthy,
                    health_reason=None if healthy else "marked unhealthy in spec",
                )
            )
        return out

    def _memory_of(self, mask: str) -> dict[str, int]:
        """Device id -> 64 MiB per core of it that `mask` names ({} for a mask
        that names none of this host's cores, or cannot be parsed). Cached:
        workers publish few distinct masks."""
        held = self._mask_cache.get(mask)
        if held is None:
            cores: dict[str, int] = {}
            try:
                ids = parse_visible_ids(mask) or []
            except ValueError:
                ids = []
            for core in ids:
                device = self._device_of.get(core)
                if device is not None:
                    cores[device] = cores.get(device, 0) + 1
            held = {d: n * PROCESS_MEMORY_PER_CORE for d, n in cores.items()}
            if len(self._mask_cache) >= MASK_CACHE_SIZE:
                self._mask_cache.clear()
            self._mask_cache[mask] = held
        return held

    def _holdings(self) -> _Holdings:
        """What the current records say, live writer or not: worked out again
        only when they were read again (the directory changed)."""
        records = self._published.records()
        if self._holdings_of is None or self._holdings_of[0] is not records:
            self._holdings_of = (records, _Holdings.of(records, self._memory_of))
        return self._holdings_of[1]

    def _held(self, pids: Collection[int] | None = None, h: _Holdings | None = None) -> dict[int, dict[str, int]]:
        """PID -> device id -> bytes, for each live process (of `pids`, if
        given) whose published mask names any of this host's cores (as `h`
        says, if given). Alive as the collector's process table shows it
        (`processes.table_in_use`), when there is one. The inner dicts are
        the cache's: read only."""
        h = self._holdings() if h is None else h
        starts = h.starts if pids is None else {p: s for p in pids if (s := h.starts.get(p)) is not None}
        memory = h.memory
        return {pid: memory[pid] for pid in alive_all(starts)}

    def process_device_memory(self, pids: Collection[int]) -> Mapping[int, Mapping[str, int]]:
        """64 MiB per core each process's current mask names (as the bridge
        published it): deterministic, and only on processes that hold cores.
        Processes with the same mask share one (read-only) mapping."""
        handoff, self._handoff = self._handoff, None
        if handoff is not None and time.monotonic() - handoff[0] < self.HANDOFF_S:
            found = handoff[1]
            return {pid: found[pid] for pid in pids if pid in found}
        return self._held(pids)

    def device_holders(self) -> dict[str, tuple[int, ...]]:
        """Every live process whose published mask names one of a device's
        cores holds that device, Ray worker or not. It stands for what the
        vendor tools report: `neuron-ls --json-output` lists the processes
        using each device (`neuron_processes`), NVML the compute processes of
        each GPU (nvmlDeviceGetComputeRunningProcesses). The reading is handed
        to the process_device_memory call that follows in the same collection,
        so one collection reads each mask once."""
        h = self._holdings()
        held = self._held(None, h)
        self._handoff = (time.monotonic(), held)
        if len(held) == len(h.starts):  # every writer is alive: all of them hold
            return dict(h.holders)
        return {d: kept for d, pids in h.holders.items() if (kept := tuple(p for p in pids if p in held))}
