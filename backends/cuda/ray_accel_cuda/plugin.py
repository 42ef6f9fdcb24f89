"""The CUDA DevicePlugin: NVIDIA GPUs through NVML, keyed by UUID."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ray_accel.devices import FAMILY_GPU, Device, NodeInfo
from ray_accel.plugin import DevicePlugin
from ray_accel.runtime import RankInfo, base_worker_env
from ray_accel.samples import DeviceSample, ProcessSample
from ray_accel.visibility import VisibilityError, parse_visible_ids
from ray_accel_cuda.nvml import NA, GpuLost, Nvml, NvmlUnavailable, text

# XIDs caused by the application, not the hardware (the Kubernetes device
# plugin's list): a crashing kernel must not mark the GPU unhealthy.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
NVML_TIMEOUT = 10
XID_WINDOW_S = 300.0
_NAME = re.compile(r"\w+\s+((?:[A-Z]+\s+)*[A-Z0-9]*\d[A-Z0-9]*)")


def accelerator_type(name: str) -> str:
    """Ray's convention: 'NVIDIA A100-SXM4-40GB' -> 'A100'."""
    m = _NAME.match(name)
    return m.group(1).replace(" ", "-") if m else "-".join(name.split()[1:] or [name])


def sysfs_bus_id(nvml_bus: str) -> str:
    """NVML '00000000:10:1C.0' -> sysfs '0000:10:1c.0'."""
    domain, _, rest = nvml_bus.lower().partition(":")
    return f"{domain[-4:]}:{rest}" if rest else nvml_bus.lower()


def numa_from_sysfs(bus: str | None, root: str = "/sys/bus/pci/devices") -> int:
    if not bus:
        return -1
    try:
        return int((Path(root) / sysfs_bus_id(bus) / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return -1


class CudaPlugin(DevicePlugin):
    name = "cuda"
    resource_name = "GPU"
    visible_ids_env = "CUDA_VISIBLE_DEVICES"
    family = FAMILY_GPU

    def __init__(self, nvml_module: Any = None, clock: Any = time.monotonic) -> None:
        self.nvml = Nvml(nvml_module)
        self._clock = clock
        self._devices: tuple[Device, ...] = ()
        self._handles: dict[str, Any] = {}
        self._lost: list[int] = []
        self._events: Any = None
        self._xids: list[tuple[float, str, int]] = []  # (when, device id, xid)
        self._driver: str | None = None
        self._cuda: str | None = None

    def probe(self) -> str | None:
        try:
            self.nvml.ensure()
            count = self.nvml.query("nvmlDeviceGetCount", default=0)
        except NvmlUnavailable as e:
            return str(e)
        if not count:
            return "NVML reports no NVIDIA GPU"
        self._driver = text(self.nvml.query("nvmlSystemGetDriverVersion"))
        cuda = self.nvml.query("nvmlSystemGetCudaDriverVersion")
        self._cuda = None if cuda is NA else f"{cuda // 1000}.{cuda % 1000 // 10}"
        self._devices = self._enumerate(count)
        if not self._devices:
            return f"all {count} GPUs failed to answer (lost: {self._lost})"
        return None

    def _enumerate(self, count: int) -> tuple[Device, ...]:
        q = self.nvml.query
        m = self.nvml.module
        found: list[tuple[Device, Any]] = []
        for i in range(count):
            try:
                h = q("nvmlDeviceGetHandleByIndex", i)
                uuid = text(q("nvmlDeviceGetUUID", h)) or f"GPU-index-{i}"
                name = text(q("nvmlDeviceGetName", h)) or "NVIDIA GPU"
                mem = q("nvmlDeviceGetMemoryInfo", h)
                pci = q("nvmlDeviceGetPciInfo", h)
                bus = text(pci.busId) if pci is not NA else None
                numa = q("nvmlDeviceGetNumaNodeId", h)
                mig = q("nvmlDeviceGetMigMode", h)
                arch = q("nvmlDeviceGetArchitecture", h)
                serial = text(q("nvmlDeviceGetSerial", h))
            except GpuLost:
                self._lost.append(i)
                continue
            mig_on = mig is not NA and bool(mig[0])
            attrs = {"mig": "enabled" if mig_on else ("disabled" if mig is not NA else "unsupported")}
            if mig_on:
                attrs["mig_note"] = "MIG instances are not scheduled individually: the GPU is one opaque device"
            dev = Device(
                id=uuid,
                family=FAMILY_GPU,
                index=i,
                model=name,
                memory_bytes=int(mem.total) if mem is not NA else 0,
                core_ids=(i,),
                numa_node=int(numa) if numa is not NA else numa_from_sysfs(bus),
                pci_bus_id=bus,
                serial=serial,
                architecture=None if arch is NA else str(arch),
                attributes=attrs,
            )
            found.append((dev, h))
            self._handles[uuid] = h
        # NVLink peers: P2P over NVLink also covers NVSwitch systems. Link
        # queries are slow, so this runs once per discovery and is kept.
        nvlink = getattr(m, "NVML_P2P_CAPS_INDEX_NVLINK", 4)
        ok = getattr(m, "NVML_P2P_STATUS_OK", 0)
        peers: dict[str, list[str]] = {d.id: [] for d, _ in found}
        for a, (da, ha) in enumerate(found):
            for db, hb in found[a + 1 :]:
                try:
                    status = q("nvmlDeviceGetP2PStatus", ha, hb, nvlink)
                except GpuLost:
                    continue
                if status is not NA and status == ok:
                    peers[da.id].append(db.id)
                    peers[db.id].append(da.id)
        return tuple(
            Device(**{**d.__dict__, "peers": tuple(peers[d.id]), "attributes": dict(d.attributes)}) for d, _ in found
        )

    def list_devices(self) -> tuple[Device, ...]:
        return self._devices

    def parse_visible(self, value: str | None) -> list[int] | None:
        """CUDA masks may name GPUs by index, by UUID (or a unique prefix), or be NoDevFiles."""
        if value is None:
            return None
        if value.strip() in ("", "NoDevFiles"):
            return []
        out: list[int] = []
        for token in (t.strip() for t in value.split(",")):
            if token.startswith(("GPU-", "MIG-")):
                match = [d.index for d in self._devices if d.id.startswith(token)]
                if len(match) != 1:
                    raise VisibilityError(f"{token!r} in CUDA_VISIBLE_DEVICES matches {len(match)} GPUs")
                ids = match
            else:
                ids = parse_visible_ids(token, total=len(self._devices)) or []
            for i in ids:
                if i in out:
                    raise VisibilityError(f"duplicate GPU {i} in CUDA_VISIBLE_DEVICES {value!r}")
                out.append(i)
        return out

    def node_info(self) -> NodeInfo:
        first = self._devices[0].model if self._devices else None
        attrs = {"lost_gpus": ",".join(map(str, self._lost))} if self._lost else {}
        return NodeInfo(
            plugin=self.name,
            family=self.family,
            accelerator_type=accelerator_type(first) if first else None,
            resource_name=self.resource_name,
            visible_ids_env=self.visible_ids_env,
            device_count=len(self._devices),
            core_count=len(self._devices),
            driver_version=self._driver,
            runtime_version=self._cuda,
            attributes=attrs,
        )

    def _poll_xids(self) -> None:
        q = self.nvml.query
        m = self.nvml.module
        if self._events is None:
            self._events = q("nvmlEventSetCreate")
            if self._events is NA:
                return
            for h in self._handles.values():
                try:
                    q("nvmlDeviceRegisterEvents", h, getattr(m, "nvmlEventTypeXidCriticalError", 8), self._events)
                except GpuLost:
                    pass
        if self._events is NA:
            return
        by_handle = {id(h): uuid for uuid, h in self._handles.items()}
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

    def gather_node_metrics(self) -> list[DeviceSample]:
        q = self.nvml.query
        self._poll_xids()
        out = []
        for d in self._devices:
            h = self._handles[d.id]
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

    def gather_process_metrics(self, pid: int) -> ProcessSample:
        held: dict[str, int] = {}
        for d in self._devices:
            try:
                procs = self.nvml.query("nvmlDeviceGetComputeRunningProcesses", self._handles[d.id], default=[])
            except GpuLost:
                continue
            for p in procs:
                if p.pid == pid and p.usedGpuMemory is not None:
                    held[d.id] = held.get(d.id, 0) + int(p.usedGpuMemory)
        return ProcessSample(pid, held)

    def collective_backend(self) -> str:
        return "nccl"

    def worker_env(self, rank: RankInfo, visible_ids: Sequence[int]) -> dict[str, str]:
        env = base_worker_env(self.visible_ids_env, rank, visible_ids)
        # Ordinals must mean what NVML's indexes mean; CUDA's default is
        # fastest-first. Async error handling: Ray's own NCCL default.
        env.update({"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"})
        return env
