"""Discovery from the Neuron driver's sysfs tree: no subprocess on this path.

Layout (Neuron sysfs user guide): ``neuron{N}/core_count``,
``neuron{N}/connected_devices`` ("12, 3, 4, 1"), ``neuron{N}/info/serial_number``,
``neuron{N}/info/architecture/{arch_type,device_name,instance_type}``,
``neuron{N}/neuron_core{c}/stats/memory_usage/device_mem/present``,
``neuron{N}/stats/hardware/*ecc*``. Counters may be a file or a directory with
``total`` and ``present``; driver 2.31 moved nodes, so every read is optional.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = "/sys/devices/virtual/neuron_device"
_DEV = re.compile(r"^neuron(\d+)$")
_CORE = re.compile(r"^neuron_core(\d+)$")


@dataclass(frozen=True)
class RawDevice:
    index: int
    core_count: int  # physical cores, as the driver counts them
    connected: tuple[int, ...]
    device_name: str | None
    arch_type: str | None
    instance_type: str | None
    serial: str | None
    numa_node: int
    bdf: str | None


def read_text(path: str | Path) -> str | None:
    # Raw os-level reads: this runs in every `ray start`, and pathlib's
    # per-call object creation cost more than the reads themselves.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 4096).decode("utf-8", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


def read_counter(path: str | Path, which: str = "present") -> int | None:
    """A counter file, or a counter directory holding `total` and `present`."""
    text = read_text(path)
    if text is None:  # a directory cannot be read as a file
        text = read_text(os.path.join(path, which))
    if text is None:
        return None
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None


def parse_connected(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    return tuple(int(t) for t in re.split(r"[,\s]+", text) if t.strip().isdigit())


def device_dirs(root: str | Path) -> list[tuple[int, str]]:
    try:
        names = os.listdir(root)
    except OSError:
        return []
    return sorted((int(m.group(1)), os.path.join(root, n)) for n in names if (m := _DEV.match(n)))


def read_tree(root: str | Path) -> list[RawDevice]:
    devices = []
    for index, d in device_dirs(root):
        count = read_counter(f"{d}/core_count")
        if count is None:
            try:
                count = sum(1 for n in os.listdir(d) if _CORE.match(n))
            except OSError:
                continue
        arch = f"{d}/info/architecture"
        numa = read_text(f"{d}/numa_node") or read_text(f"{d}/device/numa_node")
        devices.append(
            RawDevice(
                index=index,
                core_count=count,
                connected=parse_connected(read_text(f"{d}/connected_devices")),
                device_name=read_text(f"{arch}/device_name"),
                arch_type=read_text(f"{arch}/arch_type"),
                instance_type=read_text(f"{arch}/instance_type"),
                serial=read_text(f"{d}/info/serial_number"),
                numa_node=int(numa) if numa and numa.lstrip("-").isdigit() else -1,
                bdf=None,
            )
        )
    return devices


def core_memory_used(root: str | Path, index: int, core: int) -> int | None:
    return read_counter(f"{root}/neuron{index}/neuron_core{core}/stats/memory_usage/device_mem")


def ecc_uncorrected(root: str | Path, index: int) -> dict[str, int]:
    hw = f"{root}/neuron{index}/stats/hardware"
    try:
        names = [n for n in os.listdir(hw) if "ecc" in n and "uncorrected" in n]
    except OSError:
        return {}
    out = {}
    for name in names:
        value = read_counter(os.path.join(hw, name), "total")
        if value is not None:
            out[name] = value
    return out
