"""Enumeration: NVML's GPUs as `Device` values, keyed by UUID.

One pass over `nvmlDeviceGetHandleByIndex(0..count-1)`. A GPU that fell off
the bus is left out and named; a driver that reports the same UUID (or PCI
bus id) for two GPUs is data the backend cannot key devices by, so it is
reported as an inconsistency naming the value, never raised.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray_accel.core.devices import Device
from ray_accel_cuda.nvml import NA, GpuLost, Nvml, text
from ray_accel_cuda.runtime import FAMILY

# Ray's convention (ray/_private/accelerators/nvidia_gpu.py, Ray 2.60):
# 'NVIDIA A100-SXM4-40GB' -> 'A100'; a mixed-case product line falls back to
# the hyphen-joined name without the vendor ('NVIDIA GeForce RTX 5090' ->
# 'GeForce-RTX-5090').
_NAME = re.compile(r"\w+\s+((?:[A-Z]+\s+)*[A-Z0-9]*\d[A-Z0-9]*)")


def accelerator_type(name: str) -> str:
    """The type Ray's `accelerator_type:<T>` resource carries for a GPU name."""
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


@dataclass(frozen=True)
class Enumerated:
    """What one pass over NVML found: the devices, the handle each was read
    through (in device order), and the indexes of GPUs that are lost."""

    devices: tuple[Device, ...]
    handles: tuple[Any, ...]
    lost: tuple[int, ...]


def _device(nvml: Nvml, i: int, h: Any) -> Device:
    q = nvml.query
    uuid = text(q("nvmlDeviceGetUUID", h)) or f"GPU-index-{i}"
    name = text(q("nvmlDeviceGetName", h)) or "NVIDIA GPU"
    mem = q("nvmlDeviceGetMemoryInfo", h)
    pci = q("nvmlDeviceGetPciInfo", h)
    bus = text(pci.busId) if pci is not NA else None
    numa = q("nvmlDeviceGetNumaNodeId", h)
    mig = q("nvmlDeviceGetMigMode", h)
    arch = q("nvmlDeviceGetArchitecture", h)
    serial = text(q("nvmlDeviceGetSerial", h))
    mig_on = mig is not NA and bool(mig[0])
    attrs = {"mig": "enabled" if mig_on else ("disabled" if mig is not NA else "unsupported")}
    if mig_on:
        attrs["mig_note"] = "MIG instances are not scheduled individually: the GPU is one opaque device"
    return Device(
        id=uuid,
        family=FAMILY,
        index=i,
        model=name,
        memory_bytes=int(mem.total) if mem is not NA else 0,
        core_ids=(i,),
        numa_node=int(numa) if numa is not NA else numa_from_sysfs(bus),
        pci_bus_id=bus,
        serial=serial,
        architecture=None if arch is NA else str(arch),
        attributes=attrs,
        accelerator_type=accelerator_type(name),
    )


def enumerate_gpus(nvml: Nvml, count: int) -> Enumerated:
    devices: list[Device] = []
    handles: list[Any] = []
    lost: list[int] = []
    for i in range(count):
        try:
            h = nvml.query("nvmlDeviceGetHandleByIndex", i)
            devices.append(_device(nvml, i, h))
        except GpuLost:
            lost.append(i)
            continue
        handles.append(h)
    return Enumerated(tuple(devices), tuple(handles), tuple(lost))


def inconsistency(devices: Sequence[Device]) -> str | None:
    """Why these devices cannot be keyed as NVML reported them, or None.

    Ray's own NVML test data reports one UUID for three GPUs (see
    tests/fakes/fake_nvml.py); a real driver doing so would make every
    UUID-keyed mask, sample and health record ambiguous.
    """
    keys: tuple[tuple[str, list[str | None]], ...] = (
        ("UUID", [d.id for d in devices]),
        ("PCI bus id", [d.pci_bus_id for d in devices]),
    )
    for label, values in keys:
        owners: dict[str, list[int]] = {}
        for d, value in zip(devices, values, strict=True):
            if value:
                owners.setdefault(value, []).append(d.index)
        for value, indexes in owners.items():
            if len(indexes) > 1:
                return (
                    f"NVML reports {label} {value!r} for GPUs {', '.join(map(str, indexes))}: "
                    "the driver's data is inconsistent, so these GPUs cannot be told apart"
                )
    return None
