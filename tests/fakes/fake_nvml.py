"""A fake NVML module with a catalogue of named scenarios.

The scenarios come from real reports: a GPU that fell off the bus (XID 79,
NVML_ERROR_GPU_IS_LOST), fields a GPU or driver does not support, a binding
newer than the driver (FunctionNotFound), MIG mode, no driver at all. Errors
are pynvml's own exception classes, so the backend sees what it would see.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

NVMLError = pynvml.NVMLError
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
GPU_IS_LOST = pynvml.NVML_ERROR_GPU_IS_LOST
LIBRARY_NOT_FOUND = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
TIMEOUT = pynvml.NVML_ERROR_TIMEOUT


@dataclass
class FakeGpu:
    index: int
    name: str = "NVIDIA A100-SXM4-80GB"
    memory_total: int = 80 * 1024**3
    memory_used: int = 1024**3
    util: int = 50
    power_mw: int = 250_000
    temp: int = 45
    numa: int = 0
    mig: tuple[int, int] | None = (0, 0)
    lost: bool = False
    lost_after_discovery: bool = False
    unsupported: set[str] = field(default_factory=set)
    ecc_uncorrected: int = 0
    processes: list[tuple[int, int]] = field(default_factory=list)

    @property
    def uuid(self) -> str:
        return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"fake-gpu-{self.index}"))


class FakeNvml:
    """Quacks like `pynvml` for the calls the cuda backend makes."""

    NVMLError = pynvml.NVMLError
    NVML_P2P_CAPS_INDEX_NVLINK = pynvml.NVML_P2P_CAPS_INDEX_NVLINK
    NVML_P2P_STATUS_OK = pynvml.NVML_P2P_STATUS_OK
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = pynvml.NVML_VOLATILE_ECC
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError

    def __init__(
        self,
        gpus: list[FakeGpu],
        nvlink: set[frozenset[int]] | None = None,
        missing: set[str] | None = None,
        init_error: int | None = None,
    ) -> None:
        self.gpus = gpus
        self.nvlink = nvlink or set()
        self.missing = missing or set()  # functions the "driver" lacks
        self.init_error = init_error
        self.events: list[tuple[int, int]] = []  # (gpu index, xid) waiting to be read
        self.calls: dict[str, int] = {}
        self.discovered = False

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if name in self.missing:
            raise NVMLError(FUNCTION_NOT_FOUND)

    def _gpu(self, h: FakeGpu, field_name: str) -> FakeGpu:
        self._count(field_name)
        if h.lost or (h.lost_after_discovery and self.discovered):
            raise NVMLError(GPU_IS_LOST)
        if field_name in h.unsupported:
            raise NVMLError(NOT_SUPPORTED)
        return h

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.90.07"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:
        return self._gpu(self.gpus[i], "nvmlDeviceGetHandleByIndex")

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        return self._gpu(h, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, h: FakeGpu) -> bytes:
        return self._gpu(h, "nvmlDeviceGetName").name.encode()  # old bindings return bytes

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu) -> SimpleNamespace:
        g = self._gpu(h, "nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(total=g.memory_total, used=g.memory_used, free=g.memory_total - g.memory_used)

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> SimpleNamespace:
        g = self._gpu(h, "nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=f"00000000:{0x10 + g.index:02X}:00.0")

    def nvmlDeviceGetNumaNodeId(self, h: FakeGpu) -> int:
        return self._gpu(h, "nvmlDeviceGetNumaNodeId").numa

    def nvmlDeviceGetMigMode(self, h: FakeGpu) -> tuple[int, int]:
        g = self._gpu(h, "nvmlDeviceGetMigMode")
        if g.mig is None:
            raise NVMLError(NOT_SUPPORTED)
        return g.mig

    def nvmlDeviceGetArchitecture(self, h: FakeGpu) -> int:
        self._gpu(h, "nvmlDeviceGetArchitecture")
        return 7  # Ampere

    def nvmlDeviceGetSerial(self, h: FakeGpu) -> str:
        return f"SER{self._gpu(h, 'nvmlDeviceGetSerial').index}"

    def nvmlDeviceGetP2PStatus(self, a: FakeGpu, b: FakeGpu, cap: int) -> int:
        self._gpu(a, "nvmlDeviceGetP2PStatus")
        self._gpu(b, "nvmlDeviceGetP2PStatus")
        linked = frozenset({a.index, b.index}) in self.nvlink
        return pynvml.NVML_P2P_STATUS_OK if linked else pynvml.NVML_P2P_STATUS_NOT_SUPPORTED

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(gpu=self._gpu(h, "nvmlDeviceGetUtilizationRates").util, memory=10)

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        return self._gpu(h, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        return self._gpu(h, "nvmlDeviceGetTemperature").temp

    def nvmlDeviceGetTotalEccErrors(self, h: FakeGpu, kind: int, counter: int) -> int:
        return self._gpu(h, "nvmlDeviceGetTotalEccErrors").ecc_uncorrected

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[SimpleNamespace]:
        g = self._gpu(h, "nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in g.processes]

    def nvmlEventSetCreate(self) -> object:
        self._count("nvmlEventSetCreate")
        return object()

    def nvmlDeviceRegisterEvents(self, h: FakeGpu, kinds: int, event_set: object) -> None:
        self._gpu(h, "nvmlDeviceRegisterEvents")

    def nvmlEventSetWait(self, event_set: object, timeout_ms: int) -> SimpleNamespace:
        if not self.events:
            raise NVMLError(TIMEOUT)
        index, xid = self.events.pop(0)
        return SimpleNamespace(device=self.gpus[index], eventData=xid)


def a100x8_nvlink() -> FakeNvml:
    gpus = [FakeGpu(i, numa=i // 4) for i in range(8)]
    return FakeNvml(gpus, nvlink={frozenset({i, j}) for i in range(8) for j in range(i + 1, 8)})


def lost_gpu() -> FakeNvml:
    nv = a100x8_nvlink()
    nv.gpus[3].lost = True
    return nv


def not_supported_fields() -> FakeNvml:
    gpus = [
        FakeGpu(i, unsupported={"nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature", "nvmlDeviceGetNumaNodeId"})
        for i in range(2)
    ]
    return FakeNvml(gpus)


def mig_enabled() -> FakeNvml:
    return FakeNvml([FakeGpu(0, mig=(1, 1)), FakeGpu(1, mig=(0, 0))])


def function_not_found() -> FakeNvml:
    return FakeNvml([FakeGpu(0), FakeGpu(1)], missing={"nvmlDeviceGetNumaNodeId", "nvmlDeviceGetTotalEccErrors"})


def library_missing() -> FakeNvml:
    return FakeNvml([], init_error=LIBRARY_NOT_FOUND)


def no_gpu() -> FakeNvml:
    return FakeNvml([])


SCENARIOS = {
    "a100x8_nvlink": a100x8_nvlink,
    "lost_gpu": lost_gpu,
    "not_supported_fields": not_supported_fields,
    "mig_enabled": mig_enabled,
    "function_not_found": function_not_found,
    "library_missing": library_missing,
    "no_gpu": no_gpu,
}
