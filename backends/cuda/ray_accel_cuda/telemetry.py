"""CUDA telemetry: utilisation, memory, power, temperature and health per GPU,
and the device memory each process holds, all through the one NVML session."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ray_accel.core.devices import Device
from ray_accel.core.samples import DeviceSample
from ray_accel.plugins.interface import Telemetry
from ray_accel_cuda.nvml import NA, GpuLost, Nvml

# XIDs caused by the application, not the hardware (the Kubernetes device
# plugin's list): a crashing kernel must not mark the GPU unhealthy.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
NVML_TIMEOUT = 10
XID_WINDOW_S = 300.0


class CudaTelemetry(Telemetry):
    def __init__(self, nvml: Nvml, devices: tuple[Device, ...], handles: Mapping[str, Any], clock: Any) -> None:
        self.nvml = nvml
        self.devices = devices
        self.handles = dict(handles)
        self._clock = clock
        self._events: Any = None
        self._xids: list[tuple[float, str, int]] = []  # (when, device id, xid)

    def _poll_xids(self) -> None:
        q = self.nvml.query
        m = self.nvml.module
        if self._events is None:
            self._events = q("nvmlEventSetCreate")
            if self._events is NA:
                return
            for h in self.handles.values():
                try:
                    q("nvmlDeviceRegisterEvents", h, getattr(m, "nvmlEventTypeXidCriticalError", 8), self._events)
                except GpuLost:
                    pass
        if self._events is NA:
            return
        by_handle = {id(h): uuid for uuid, h in self.handles.items()}
        for _ in range(256):  # bounded: never spin on a flood of events
            try:
                event = self.nvml.module.nvmlEventSetWait(self._events, 0)
            except Exception as e:
                if getattr(e, "value", None) != NVML_TIMEOUT:
                    pass
                return
            xid = int(getattr(event, "eventData", 0))
            uuid = by_handle.get(id(getattr(event, "device", None)))
            if uuid is not None and xid not in APPLICATION_XIDS:
                self._xids.append((self._clock(), uuid, xid))

    def _health(self, device_id: str, h: Any) -> str | None:
        now = self._clock()
        self._xids = [x for x in self._xids if now - x[0] < XID_WINDOW_S]
        recent = sorted({x for _, d, x in self._xids if d == device_id})
        if recent:
            return f"XID {','.join(map(str, recent))} in the last {XID_WINDOW_S:.0f}s"
        m = self.nvml.module
        ecc = self.nvml.query(
            "nvmlDeviceGetTotalEccErrors",
            h,
            getattr(m, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
            getattr(m, "NVML_VOLATILE_ECC", 0),
        )
        if ecc is not NA and ecc > 0:
            return f"{ecc} uncorrected ECC errors since the driver loaded"
        return None

    def device_samples(self) -> list[DeviceSample]:
        q = self.nvml.query
        self._poll_xids()
        out = []
        for d in self.devices:
            h = self.handles[d.id]
            try:
                util = q("nvmlDeviceGetUtilizationRates", h)
                mem = q("nvmlDeviceGetMemoryInfo", h)
                power = q("nvmlDeviceGetPowerUsage", h)
                temp = q("nvmlDeviceGetTemperature", h, getattr(self.nvml.module, "NVML_TEMPERATURE_GPU", 0))
                reason = self._health(d.id, h)
            except GpuLost:
                out.append(DeviceSample(d.id, None, None, d.memory_bytes, healthy=False, health_reason="GPU is lost"))
                continue
            out.append(
                DeviceSample(
                    device_id=d.id,
                    utilization=None if util is NA else util.gpu / 100,
                    memory_used_bytes=None if mem is NA else int(mem.used),
                    memory_total_bytes=d.memory_bytes if mem is NA else int(mem.total),
                    power_watts=None if power is NA else power / 1000,
                    temperature_c=None if temp is NA else float(temp),
                    healthy=reason is None,
                    health_reason=reason,
                )
            )
        return out

    def process_device_memory(self, pids: Collection[int]) -> dict[int, dict[str, int]]:
        wanted = set(pids)
        held: dict[int, dict[str, int]] = {}
        for d in self.devices:
            try:
                procs = self.nvml.query("nvmlDeviceGetComputeRunningProcesses", self.handles[d.id], default=[])
            except GpuLost:
                continue
            for p in procs:
                if p.pid in wanted and p.usedGpuMemory is not None:
                    mine = held.setdefault(p.pid, {})
                    mine[d.id] = mine.get(d.id, 0) + int(p.usedGpuMemory)
        return held
