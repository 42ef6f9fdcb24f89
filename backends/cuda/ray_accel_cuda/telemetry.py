"""CUDA telemetry: one sample per GPU (utilisation, memory, power,
temperature, the XIDs of the last window) and the processes holding each
GPU, all through the one NVML session."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from ray_accel.core.devices import Device
from ray_accel.core.samples import DeviceSample
from ray_accel.plugins.interface import Telemetry
from ray_accel_cuda.health import APPLICATION_XIDS, PollErrors, XidMonitor
from ray_accel_cuda.nvml import NA, GpuLost, Nvml


class CudaTelemetry(Telemetry):
    def __init__(
        self,
        nvml: Nvml,
        devices: Sequence[Device],
        handles: Mapping[str, Any],
        clock: Callable[[], float],
        ignored_xids: frozenset[int] = APPLICATION_XIDS,
    ) -> None:
        self.nvml = nvml
        self.devices = tuple(devices)
        self.handles = dict(handles)
        self.errors = PollErrors()
        self.xids = XidMonitor(nvml, self.handles, clock, self.errors, ignored=ignored_xids)
        self._processes: list[tuple[Device, list[Any]]] | None = None  # this collection's, see _compute_processes

    def _sample(self, d: Device) -> DeviceSample:
        q = self.nvml.query
        h = self.handles[d.id]
        try:
            util = q("nvmlDeviceGetUtilizationRates", h)
            mem = q("nvmlDeviceGetMemoryInfo", h)
            power_mw = q("nvmlDeviceGetPowerUsage", h)
            temp = q("nvmlDeviceGetTemperature", h, getattr(self.nvml.module, "NVML_TEMPERATURE_GPU", 0))
        except GpuLost:
            return DeviceSample(
                device_id=d.id, utilization=None, memory_used_bytes=None, memory_total_bytes=d.memory_bytes
            )
        return DeviceSample(
            device_id=d.id,
            utilization=None if util is NA else util.gpu / 100,
            memory_used_bytes=None if mem is NA else int(mem.used),
            memory_total_bytes=d.memory_bytes if mem is NA else int(mem.total),
            power_watts=None if power_mw is NA else power_mw / 1000,  # NVML reports milliwatts
            temperature_c=None if temp is NA else float(temp),
            recent_events=len(self.xids.recent(d.id)),
        )

    def device_samples(self) -> list[DeviceSample]:
        self._processes = None  # a new collection
        self.xids.poll()
        return [self._sample(d) for d in self.devices]

    def _compute_processes(self) -> list[tuple[Device, list[Any]]]:
        """(device, its compute processes) for every GPU that answers. A
        collection begins with `device_samples`, then asks `device_holders`
        and `process_device_memory` (the metrics layer's order): NVML is asked
        once per GPU per collection, and both answer from the same list."""
        if self._processes is None:
            self._processes = []
            for d in self.devices:
                try:
                    procs = self.nvml.query("nvmlDeviceGetComputeRunningProcesses", self.handles[d.id], default=[])
                except GpuLost:
                    continue
                self._processes.append((d, list(procs)))
        return self._processes

    def process_device_memory(self, pids: Collection[int]) -> dict[int, dict[str, int]]:
        wanted = set(pids)
        held: dict[int, dict[str, int]] = {}
        for d, procs in self._compute_processes():
            for p in procs:
                # usedGpuMemory is None where the driver cannot say (WDDM).
                if p.pid in wanted and p.usedGpuMemory is not None:
                    mine = held.setdefault(p.pid, {})
                    mine[d.id] = mine.get(d.id, 0) + int(p.usedGpuMemory)
        return held

    def device_holders(self) -> dict[str, tuple[int, ...]]:
        """Device id -> PIDs holding a compute context on it (sorted, each once),
        for every GPU that answers; a lost GPU is absent."""
        return {d.id: tuple(sorted({int(p.pid) for p in procs})) for d, procs in self._compute_processes()}

    def attributes(self) -> dict[str, str]:
        """Health-poll facts for the host's attributes: errors met, XID support."""
        out = self.errors.attributes()
        if self.xids.supported is not None:
            out["xid_events"] = "supported" if self.xids.supported else "unsupported"
        return out
