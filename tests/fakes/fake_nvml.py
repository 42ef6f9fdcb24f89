"""A fake NVML module with a catalogue of named scenarios.

The scenarios come from real reports: a GPU that fell off the bus (XID 79,
NVML_ERROR_GPU_IS_LOST), fields a GPU or driver does not support, a binding
newer than the driver (FunctionNotFound), MIG mode, no driver at all, and a
driver that reports one UUID for several GPUs (Ray's own NVML test data).
Errors are pynvml's own exception classes, so the backend sees what it would
see.

Handles behave as nvidia-ml-py's do (module `pynvml`, distribution
nvidia-ml-py 13.615.71, read in the venv's `pynvml.py`):

- `nvmlDeviceGetHandleByIndex` builds a new `c_nvmlDevice_t()` on every call
  (`c_nvmlDevice_t = POINTER(struct_c_nvmlDevice_t)`; the function does
  `device = c_nvmlDevice_t(); fn(c_index, byref(device)); return device`),
  so two handles of one GPU are two objects. A ctypes pointer compares by
  identity (two pointers to one address are unequal) and is unhashable, so
  `FakeHandle` has identity equality and `__hash__ = None`.
- `nvmlEventSetWait` returns a `c_nvmlEventData_t` whose `device` field is a
  `c_nvmlDevice_t` the library wrote, and ctypes builds a new pointer object on
  every read of that field: the event's handle is never one the caller holds.
  The only ways back to a GPU are calls on it (`nvmlDeviceGetUUID`,
  `nvmlDeviceGetIndex`, `nvmlDeviceGetPciInfo`).
- Events arrive only for devices registered on that event set
  (`nvmlDeviceRegisterEvents`), one per wait; an empty set times out
  (NVML_ERROR_TIMEOUT, "raises NVML_ERROR_TIMEOUT exception on timeout").
  Each event set gets every event of its devices (nvml.h,
  nvmlDeviceRegisterEvents: "Starts recording of events on a specified
  devices and add the events to specified nvmlEventSet_t"), so two sets
  (the samples' and the health monitor's) do not take each other's events.
- `nvmlDeviceGetHandleByUUID` (nvml.h): NVML_ERROR_NOT_FOUND "if uuid does
  not match a valid device on the system", NVML_ERROR_GPU_IS_LOST "if any
  GPU has fallen off the bus or is otherwise inaccessible" (any GPU, not
  only the one asked for); calls on one GPU's handle answer GPU_IS_LOST
  for "the target GPU" only.

Two drivers for GPU health: `FakeNvml` is a binding (or driver) without
the recovery action field, where the XID list decides; `RecoveryNvml` has
it, as nvidia-ml-py 13.615.71 does (`NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`,
field 230, and `NVML_GPU_RECOVERY_ACTION_*`, read from the installed
`pynvml` by name: copies differ, 5 being RECOVER_IMEX_DOMAIN there and
GPU_RESET_BUS in the copy Ray 2.60 bundles) and as a real H100 on driver
580.159.04 answers it (NONE while well). `nvmlDeviceGetFieldValues` returns
one `c_nvmlFieldValue_t` per field with its own `nvmlReturn` (a driver that
does not support the field answers NVML_ERROR_NOT_SUPPORTED there) and an
unsigned int value (nvml.h; NVIDIA's DRA driver reads it the same way,
kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/device_health.go,
`queryGPURecoveryAction`). What each action asks is NVIDIA's "Error
Recovery and Response Flags"
(https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html).

Failure scenarios that happen to a running host are in `FAULTS` (each
names its public source); they act on a fake after discovery.
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
UNKNOWN = pynvml.NVML_ERROR_UNKNOWN
INVALID_ARGUMENT = pynvml.NVML_ERROR_INVALID_ARGUMENT
NOT_FOUND = pynvml.NVML_ERROR_NOT_FOUND

# Ray's own NVML test data: `GPU_MOCK_DATA` in ray-project/ray
# python/ray/tests/accelerators/test_nvidia_gpu.py (commit d6d53738), served by
# `PyNVMLMock` from python/ray/tests/accelerators/mock_pynvml.py: three GPUs,
# two "Ampere A100-SXM4-40GB" and one "Tesla V100-SXM2-16GB", all reporting
# this one UUID.
RAY_MOCK_UUID = "GPU-8eaaebb8-bb64-8489-fda2-62256e821983"


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
    gone: bool = False  # no longer on the system: NVML does not find it by UUID
    unsupported: set[str] = field(default_factory=set)
    ecc_uncorrected: int = 0
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    uuid_override: str | None = None
    # The driver's recommended recovery action, by the binding's name less
    # NVML_GPU_RECOVERY_ACTION_ ("DRAIN_AND_RESET"), or a raw value (RecoveryNvml only).
    recovery_action: str | int = "NONE"
    # nvmlDeviceGetPersistenceMode (nvml.h): NVML_FEATURE_ENABLED (1) or NVML_FEATURE_DISABLED (0).
    persistence: int = 0
    graphics_processes: list[tuple[int, int | None]] = field(default_factory=list)

    @property
    def uuid(self) -> str:
        if self.uuid_override is not None:
            return self.uuid_override
        return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"fake-gpu-{self.index}"))


class FakeHandle:
    """A `c_nvmlDevice_t`: a fresh object per call, equal only to itself,
    unhashable (see the module docstring)."""

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, gpu: FakeGpu) -> None:
        self._gpu = gpu

    def __repr__(self) -> str:
        return f"<FakeHandle of GPU {self._gpu.index} at {id(self):#x}>"


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
        self.events: list[tuple[int, int]] = []  # (gpu index, xid) raised by the "driver", in order
        self.delivered: dict[int, int] = {}  # event set -> how many of `events` it has been through
        self.wait_errors: list[int] = []  # NVML codes the next nvmlEventSetWait calls fail with
        self.lookup_errors: list[int] = []  # NVML codes the next nvmlDeviceGetHandleByUUID calls fail with
        self.registered: dict[int, set[int]] = {}  # event set -> registered GPU indexes
        self.calls: dict[str, int] = {}
        self.discovered = False

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if name in self.missing:
            raise NVMLError(FUNCTION_NOT_FOUND)

    def _gpu(self, h: FakeHandle, field_name: str) -> FakeGpu:
        self._count(field_name)
        if not isinstance(h, FakeHandle):
            # ctypes refuses anything but a c_nvmlDevice_t as a handle argument.
            raise NVMLError(INVALID_ARGUMENT)
        g = h._gpu
        if self._is_lost(g) or g.gone:  # gone: "otherwise inaccessible"
            raise NVMLError(GPU_IS_LOST)
        if field_name in g.unsupported:
            raise NVMLError(NOT_SUPPORTED)
        return g

    def _is_lost(self, g: FakeGpu) -> bool:
        return g.lost or (g.lost_after_discovery and self.discovered)

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

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeHandle:
        handle = FakeHandle(self.gpus[i])
        self._gpu(handle, "nvmlDeviceGetHandleByIndex")
        return handle

    def nvmlDeviceGetHandleByUUID(self, uuid_text: str) -> FakeHandle:
        self._count("nvmlDeviceGetHandleByUUID")
        if self.lookup_errors:
            raise NVMLError(self.lookup_errors.pop(0))
        if any(self._is_lost(g) for g in self.gpus):
            raise NVMLError(GPU_IS_LOST)  # nvml.h: "if any GPU has fallen off the bus"
        for g in self.gpus:
            if g.uuid == uuid_text and not g.gone:
                return FakeHandle(g)
        raise NVMLError(NOT_FOUND)

    def nvmlDeviceGetUUID(self, h: FakeHandle) -> str:
        return self._gpu(h, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetIndex(self, h: FakeHandle) -> int:
        return self._gpu(h, "nvmlDeviceGetIndex").index

    def nvmlDeviceGetName(self, h: FakeHandle) -> bytes:
        return self._gpu(h, "nvmlDeviceGetName").name.encode()  # old bindings return bytes

    def nvmlDeviceGetMemoryInfo(self, h: FakeHandle) -> SimpleNamespace:
        g = self._gpu(h, "nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(total=g.memory_total, used=g.memory_used, free=g.memory_total - g.memory_used)

    def nvmlDeviceGetPciInfo(self, h: FakeHandle) -> SimpleNamespace:
        g = self._gpu(h, "nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=f"00000000:{0x10 + g.index:02X}:00.0")

    def nvmlDeviceGetNumaNodeId(self, h: FakeHandle) -> int:
        return self._gpu(h, "nvmlDeviceGetNumaNodeId").numa

    def nvmlDeviceGetMigMode(self, h: FakeHandle) -> tuple[int, int]:
        g = self._gpu(h, "nvmlDeviceGetMigMode")
        if g.mig is None:
            raise NVMLError(NOT_SUPPORTED)
        return g.mig

    def nvmlDeviceGetArchitecture(self, h: FakeHandle) -> int:
        self._gpu(h, "nvmlDeviceGetArchitecture")
        return 7  # Ampere

    def nvmlDeviceGetSerial(self, h: FakeHandle) -> str:
        return f"SER{self._gpu(h, 'nvmlDeviceGetSerial').index}"

    def nvmlDeviceGetP2PStatus(self, a: FakeHandle, b: FakeHandle, cap: int) -> int:
        ga = self._gpu(a, "nvmlDeviceGetP2PStatus")
        gb = self._gpu(b, "nvmlDeviceGetP2PStatus")
        linked = frozenset({ga.index, gb.index}) in self.nvlink
        return pynvml.NVML_P2P_STATUS_OK if linked else pynvml.NVML_P2P_STATUS_NOT_SUPPORTED

    def nvmlDeviceGetUtilizationRates(self, h: FakeHandle) -> SimpleNamespace:
        return SimpleNamespace(gpu=self._gpu(h, "nvmlDeviceGetUtilizationRates").util, memory=10)

    def nvmlDeviceGetPowerUsage(self, h: FakeHandle) -> int:
        return self._gpu(h, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetTemperature(self, h: FakeHandle, sensor: int) -> int:
        return self._gpu(h, "nvmlDeviceGetTemperature").temp

    def nvmlDeviceGetTotalEccErrors(self, h: FakeHandle, kind: int, counter: int) -> int:
        return self._gpu(h, "nvmlDeviceGetTotalEccErrors").ecc_uncorrected

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeHandle) -> list[SimpleNamespace]:
        g = self._gpu(h, "nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in g.processes]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: FakeHandle) -> list[SimpleNamespace]:
        g = self._gpu(h, "nvmlDeviceGetGraphicsRunningProcesses")
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in g.graphics_processes]

    def nvmlDeviceGetPersistenceMode(self, h: FakeHandle) -> int:
        return self._gpu(h, "nvmlDeviceGetPersistenceMode").persistence

    def nvmlEventSetCreate(self) -> int:
        self._count("nvmlEventSetCreate")
        event_set = len(self.registered) + 1
        self.registered[event_set] = set()
        return event_set

    def nvmlDeviceRegisterEvents(self, h: FakeHandle, kinds: int, event_set: int) -> None:
        g = self._gpu(h, "nvmlDeviceRegisterEvents")
        if kinds & pynvml.nvmlEventTypeXidCriticalError:
            self.registered[event_set].add(g.index)

    def nvmlEventSetWait(self, event_set: int, timeout_ms: int) -> SimpleNamespace:
        self._count("nvmlEventSetWait")
        if self.wait_errors:
            raise NVMLError(self.wait_errors.pop(0))
        wanted = self.registered.get(event_set, set())
        start = self.delivered.get(event_set, 0)
        for n in range(start, len(self.events)):
            index, xid = self.events[n]
            if index in wanted:
                self.delivered[event_set] = n + 1
                # c_nvmlEventData_t's fields; `device` is a new handle object.
                return SimpleNamespace(
                    device=FakeHandle(self.gpus[index]),
                    eventType=pynvml.nvmlEventTypeXidCriticalError,
                    eventData=xid,
                    gpuInstanceId=0xFFFFFFFF,
                    computeInstanceId=0xFFFFFFFF,
                )
        self.delivered[event_set] = len(self.events)
        raise NVMLError(TIMEOUT)


RECOVERY_FIELD = "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"
ACTION_PREFIX = "NVML_GPU_RECOVERY_ACTION_"
BINDING_ACTIONS = {
    n.removeprefix(ACTION_PREFIX): getattr(pynvml, n) for n in dir(pynvml) if n.startswith(ACTION_PREFIX)
}


class RecoveryNvml(FakeNvml):
    """A binding and driver with the recovery action field; `actions` are the
    binding's names (the installed nvidia-ml-py's by default)."""

    def __init__(
        self, gpus: list[FakeGpu], actions: dict[str, int] | None = None, knows_field: bool = True, **kw: Any
    ) -> None:
        super().__init__(gpus, **kw)
        self.knows_field = knows_field  # False: an older driver, for which field 230 is an unknown id
        setattr(self, RECOVERY_FIELD, getattr(pynvml, RECOVERY_FIELD))
        self.NVML_VALUE_TYPE_UNSIGNED_INT = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
        for name, value in (BINDING_ACTIONS if actions is None else actions).items():
            setattr(self, ACTION_PREFIX + name, value)

    def nvmlDeviceGetFieldValues(self, h: FakeHandle, field_ids: list[int]) -> list[SimpleNamespace]:
        g = self._gpu(h, "nvmlDeviceGetFieldValues")
        out = []
        for field_id in field_ids:
            code, value = pynvml.NVML_SUCCESS, 0
            if field_id != getattr(pynvml, RECOVERY_FIELD) or not self.knows_field:
                code = INVALID_ARGUMENT  # what a real H100 on driver 580.159.04 answers for an unknown field id
            elif RECOVERY_FIELD in g.unsupported:
                code = NOT_SUPPORTED
            elif isinstance(g.recovery_action, int):
                value = g.recovery_action
            else:
                value = getattr(self, ACTION_PREFIX + g.recovery_action)
            out.append(
                SimpleNamespace(
                    fieldId=field_id,
                    scopeId=0,
                    timestamp=0,
                    latencyUsec=0,
                    valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
                    nvmlReturn=code,
                    value=SimpleNamespace(uiVal=value),
                )
            )
        return out


def h100x8_recovery() -> RecoveryNvml:
    """Eight NVLinked H100s on a driver that reports each GPU's recovery action."""
    gpus = [FakeGpu(i, name="NVIDIA H100 80GB HBM3", numa=i // 4) for i in range(8)]
    return RecoveryNvml(gpus, nvlink={frozenset({i, j}) for i in range(8) for j in range(i + 1, 8)})


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


def ray_duplicate_uuid() -> FakeNvml:
    """Ray's GPU_MOCK_DATA (see RAY_MOCK_UUID): A100, A100, V100, one UUID."""
    return FakeNvml(
        [
            FakeGpu(0, name="Ampere A100-SXM4-40GB", memory_total=40 * 1024**3, uuid_override=RAY_MOCK_UUID),
            FakeGpu(1, name="Ampere A100-SXM4-40GB", memory_total=40 * 1024**3, uuid_override=RAY_MOCK_UUID),
            FakeGpu(2, name="Tesla V100-SXM2-16GB", memory_total=16 * 1024**3, uuid_override=RAY_MOCK_UUID),
        ]
    )


def mixed_v100_a100() -> FakeNvml:
    """One V100 and two NVLinked A100s, each with its own UUID (a host Ray 2.60
    types by GPU 0 alone)."""
    return FakeNvml(
        [
            FakeGpu(0, name="Tesla V100-SXM2-16GB", memory_total=16 * 1024**3),
            FakeGpu(1, name="NVIDIA A100-SXM4-40GB", memory_total=40 * 1024**3, numa=1),
            FakeGpu(2, name="NVIDIA A100-SXM4-40GB", memory_total=40 * 1024**3, numa=1),
        ],
        nvlink={frozenset({1, 2})},
    )


SCENARIOS = {
    "a100x8_nvlink": a100x8_nvlink,
    "lost_gpu": lost_gpu,
    "not_supported_fields": not_supported_fields,
    "mig_enabled": mig_enabled,
    "function_not_found": function_not_found,
    "library_missing": library_missing,
    "no_gpu": no_gpu,
    "ray_duplicate_uuid": ray_duplicate_uuid,
    "mixed_v100_a100": mixed_v100_a100,
    "h100x8_recovery": h100x8_recovery,
}


# ---------------------------------------------------------------------------
# Failures of a running host, each from a public source
# ---------------------------------------------------------------------------


def fall_off_the_bus(nv: FakeNvml, index: int) -> None:
    """XID 79, "GPU has fallen off the bus" (NVIDIA's XID catalogue,
    docs.nvidia.com/deploy/xid-errors), after which every call on the GPU
    answers NVML_ERROR_GPU_IS_LOST (nvml.h) and looking any GPU up by UUID does
    too ("if any GPU has fallen off the bus")."""
    nv.events.append((index, 79))
    nv.gpus[index].lost_after_discovery = True


def back_on_the_bus(nv: FakeNvml, index: int) -> None:
    """The GPU answers again (after a reset: `nvidia-smi --gpu-reset`, or the
    bus rescanned through nvmlDeviceDiscoverGpus, nvml.h "Drain states")."""
    nv.gpus[index].lost_after_discovery = False
    nv.gpus[index].gone = False


def removed(nv: FakeNvml, index: int) -> None:
    """The GPU is no longer on the system (nvmlDeviceRemoveGpu, nvml.h
    "Drain states"; or the driver unbound): nvmlDeviceGetHandleByUUID answers
    NVML_ERROR_NOT_FOUND "if uuid does not match a valid device on the system"."""
    nv.gpus[index].gone = True


def application_fault(nv: FakeNvml, index: int) -> None:
    """XID 13, "Graphics Engine Exception": an application error, in the
    device plugin's ignored list (NVIDIA/k8s-device-plugin internal/rm/health.go)."""
    nv.events.append((index, 13))


def double_bit_ecc(nv: FakeNvml, index: int) -> None:
    """XID 48, "Double Bit ECC Error" (NVIDIA's XID catalogue): the volatile
    uncorrected ECC count grows (nvmlDeviceGetTotalEccErrors with
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC: counts since the
    driver loaded, nvml.h "ECC Error Counts")."""
    nv.events.append((index, 48))
    nv.gpus[index].ecc_uncorrected += 1


def event_wait_fails(nv: FakeNvml, index: int) -> None:
    """nvmlEventSetWait answers an error other than a timeout
    (NVML_ERROR_UNKNOWN); NVIDIA's device plugin marks every GPU unhealthy
    then (internal/rm/health.go: "Error waiting for event ... marking all
    devices as unhealthy"), which ray-accel does not: the events are unread."""
    nv.wait_errors.append(UNKNOWN)


def lookup_fails(nv: FakeNvml, index: int) -> None:
    """nvmlDeviceGetHandleByUUID answers NVML_ERROR_UNKNOWN ("on any
    unexpected error", nvml.h) once, for the next GPU looked up."""
    nv.lookup_errors.append(UNKNOWN)


def drain_and_reset(nv: FakeNvml, index: int) -> None:
    """The driver asks for NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET ("Drain
    P2P and Reset Gpu", cuda-python's `DeviceGpuRecoveryAction`), with no XID."""
    nv.gpus[index].recovery_action = "DRAIN_AND_RESET"


def reset_done(nv: FakeNvml, index: int) -> None:
    """The GPU was reset: the driver's recovery action reads NONE again."""
    nv.gpus[index].recovery_action = "NONE"


FAULTS = {
    "drain_and_reset": drain_and_reset,
    "reset_done": reset_done,
    "lookup_fails": lookup_fails,
    "fall_off_the_bus": fall_off_the_bus,
    "back_on_the_bus": back_on_the_bus,
    "removed": removed,
    "application_fault": application_fault,
    "double_bit_ecc": double_bit_ecc,
    "event_wait_fails": event_wait_fails,
}
