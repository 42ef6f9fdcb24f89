"""The CUDA DevicePlugin: NVIDIA GPUs through NVML, keyed by UUID."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from ray_accel.core.devices import FAMILY_GPU, Device, NodeInfo
from ray_accel.plugins.interface import DevicePlugin
from ray_accel_cuda.nvml import NA, GpuLost, Nvml, NvmlUnavailable, text
from ray_accel_cuda.runtime import CudaRuntime
from ray_accel_cuda.telemetry import CudaTelemetry
from ray_accel_cuda.visible import parse_cuda_visible

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
        self._telemetry: CudaTelemetry | None = None
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

    @property
    def runtime(self) -> CudaRuntime:
        return CudaRuntime()

    @property
    def telemetry(self) -> CudaTelemetry:
        if self._telemetry is None:
            self._telemetry = CudaTelemetry(self.nvml, self._devices, self._handles, self._clock)
        return self._telemetry

    def parse_visible(self, value: str | None) -> list[int] | None:
        """CUDA masks may name GPUs by index, by UUID (or a unique prefix), or be NoDevFiles."""
        return parse_cuda_visible(value, self._devices)

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
