"""Reading what the kernel shows about Neuron devices: no subprocess here.

Layout from the Neuron driver's source (aws-neuron/aws-neuron-driver @
fca19f7d = aws-neuronx-dkms 2.24.7.0; `neuron_cdev.c`,
`neuron_sysfs_metrics.c`), unchanged through @ 9cc489ec = 2.30.2.0 (the
driver of Neuron 2.32), which adds Trainium3 and its health nodes:

- `<neuron root>/neuronN/` (class `neuron_device`, created with no parent
  device: no `device` link, no `numa_node`): `core_count` ("%d", physical
  cores, **root-only 0400**), `connected_devices` ("12, 3, 4, 1\\n" or "\\n",
  **root-only 0400**), `info/serial_number`, `info/architecture/{arch_type,
  device_name,instance_type}` (0644), one `neuron_coreC/` per physical core.
- Counters are directories holding `total` and `present`: for
  `neuron_coreC/stats/memory_usage/device_mem`, `total` is the memory in use
  (`present` is only the size of the last allocation or free).
- `neuronN/stats/hardware/{mem_ecc_uncorrected,sram_ecc_uncorrected,
  mem_ecc_repairable_uncorrected}` are plain files ("%u\\n").
- `neuronN/stats/hardware/health_status/{unhealthy_components,
  healthcheck_heartbeat,hw_error_event}` (0444; 2.30.2.0, created where the
  driver's `health_status_enabled` is set: V4, i.e. Trainium3, only).
- PCI: `<sys>/bus/pci/drivers/neuron/<bdf>` -> the function, with `device`,
  `numa_node` ("-1": no NUMA information) and `local_cpulist` (kernel ABI).
  The Neuron tree never says which BDF is which device index.
- DMI: `<sys>/devices/virtual/dmi/id/product_name` holds the EC2 instance
  type (the driver reads it too, `ndhal_instance_type_pod`).
- `/dev/neuronN`: character devices the driver's udev rule makes 0666 (or
  0660 group `neuron` when hardened); in a container only the mounted ones.

Driver 2.31 (Neuron 2.33) "reorganized the Neuron sysfs tree and moved
several nodes to new paths", not backwards compatible (the Neuron sysfs user
guide, v2.33.0). Which nodes moved where is not published (no 2.31 source,
and the guide's tree is not readable here), so nothing here guesses new
paths: the layout is read by feature, node by node, and `layout_problem`
says when a tree has none of the nodes above, so discovery falls back to
`neuron-ls` with that reason.

Every read goes through `ray_accel.core.files` (bounded, never blocks on a
FIFO) and keeps its failure reason, so discovery can say which fact is
missing and why. Parsers are strict: a value that does not fit the driver's
format raises `BadData` naming it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ray_accel.core import files
from ray_accel_neuron import limits

DEFAULT_SYS_ROOT = "/sys"
NEURON_CLASS_DIR = os.path.join("devices", "virtual", "neuron_device")
DMI_PRODUCT = os.path.join("devices", "virtual", "dmi", "id", "product_name")
PCI_DRIVER_DIR = os.path.join("bus", "pci", "drivers", "neuron")
PCI_DEVICES_DIR = os.path.join("bus", "pci", "devices")
ATTR_MAX_BYTES = 4096  # one page: the most a sysfs attribute returns

_DEV = re.compile(r"^neuron([0-9]+)$")
_CORE = re.compile(r"^neuron_core([0-9]+)$")
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_CONNECTED = re.compile(r"^[0-9]+(?:\s*,\s*[0-9]+)*$")


@dataclass(frozen=True)
class Reading:
    """One file read: its text, or why there is none."""

    path: str
    text: str | None
    error: str | None = None
    refused: bool = False  # not a regular file, or too large: the tree itself is wrong

    @property
    def denied(self) -> bool:
        return self.error == "permission denied"

    @property
    def absent(self) -> bool:
        return self.error == "absent"


def read(path: str) -> Reading:
    try:
        return Reading(path, files.read_attribute(path, ATTR_MAX_BYTES))
    except files.UnreadableFile as e:
        return Reading(path, None, files.describe(e), refused=True)
    except OSError as e:
        return Reading(path, None, files.describe(e))


# ---------------------------------------------------------------------------
# Parsers (pure; BadData names the value)
# ---------------------------------------------------------------------------


def parse_count(text: str, what: str) -> int:
    value = text.strip()
    if not value.isascii() or not value.isdigit() or len(value) > 9:
        raise limits.BadData(f"{what} is {text!r}, not a count")
    return int(value)


def parse_connected(text: str, what: str) -> tuple[int, ...]:
    """'12, 3, 4, 1\\n' -> (12, 3, 4, 1); '\\n' -> ()."""
    value = text.strip()
    if not value:
        return ()
    if not value.isascii() or not _CONNECTED.match(value):
        raise limits.BadData(f"{what} is {text!r}, not a list of device indexes")
    out = tuple(int(t) for t in re.split(r"\s*,\s*", value))
    for p in out:
        limits.device_index(p, f"{what} entry")
    if len(set(out)) != len(out):
        raise limits.BadData(f"{what} is {text!r}: a device is listed twice")
    return out


def parse_u64(text: str, what: str) -> int:
    """A driver counter ("%llu")."""
    value = text.strip()
    if not value.isascii() or not value.isdigit() or len(value) > 20 or int(value) >= 1 << 64:
        raise limits.BadData(f"{what} is {text!r}, not a counter")
    return int(value)


def parse_numa(text: str, what: str) -> int:
    value = text.strip()
    if value == "-1":
        return -1
    return parse_count(value, what)


def parse_hex(text: str, what: str) -> int:
    value = text.strip().lower()
    if not re.fullmatch(r"0x[0-9a-f]{1,8}", value):
        raise limits.BadData(f"{what} is {text!r}, not a hexadecimal id")
    return int(value, 16)


def parse_serial(text: str) -> str | None:
    """The driver prints "\\n" when it could not read the serial."""
    return text.strip() or None


# ---------------------------------------------------------------------------
# The Neuron class tree
# ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SysfsDevice:
    index: int
    path: str
    core_count: Reading
    core_dirs: int | None  # neuron_coreN directories (readable by anyone); None if unlistable
    connected: Reading
    device_name: Reading
    arch_type: Reading
    serial: Reading


def list_device_dirs(neuron_root: str) -> tuple[list[tuple[int, str]], str | None]:
    """(index, path) of every neuronN entry, or the reason the root cannot be
    listed; `BadData` when two entries name one device (neuron1, neuron01)."""
    try:
        names = os.listdir(neuron_root)
    except OSError as e:
        return [], f"{neuron_root}: {files.describe(e)}"
    found: dict[int, str] = {}
    for name in sorted(names):
        m = _DEV.match(name)
        if m and len(m.group(1)) <= 9:
            index = int(m.group(1))
            if index in found:  # neuron1 and neuron01: which one is the device cannot be told
                raise limits.BadData(
                    f"{neuron_root}: {os.path.basename(found[index])} and {name} both name Neuron device {index}"
                )
            found[index] = os.path.join(neuron_root, name)
    return sorted(found.items()), None


def _count_core_dirs(path: str) -> int | None:
    try:
        return sum(1 for n in os.listdir(path) if _CORE.match(n))
    except OSError:
        return None


def read_device(index: int, path: str) -> SysfsDevice:
    arch = os.path.join(path, "info", "architecture")
    return SysfsDevice(
        index=index,
        path=path,
        core_count=read(os.path.join(path, "core_count")),
        core_dirs=_count_core_dirs(path),
        connected=read(os.path.join(path, "connected_devices")),
        device_name=read(os.path.join(arch, "device_name")),
        arch_type=read(os.path.join(arch, "arch_type")),
        serial=read(os.path.join(path, "info", "serial_number")),
    )


def layout_problem(devices: tuple[SysfsDevice, ...]) -> str | None:
    """None when some device shows a node this backend reads; else why the
    tree is not the layout it knows (every node absent, not denied)."""
    if not devices:
        return None
    for d in devices:
        readings = (d.core_count, d.connected, d.device_name, d.arch_type, d.serial)
        if d.core_dirs or any(not r.absent for r in readings):
            return None
    root = os.path.dirname(devices[0].path)
    return (
        f"{root} has {len(devices)} neuronN entries but none of core_count, connected_devices, "
        "info/architecture/{device_name,arch_type}, info/serial_number or neuron_coreN in any: not the "
        "layout of Neuron drivers 2.24 to 2.30 that this backend reads (driver 2.31 moved sysfs nodes "
        "to paths not published)"
    )


# ---------------------------------------------------------------------------
# PCI, DMI, /dev
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PciFunction:
    bdf: str
    device_id: int | None
    numa_node: int | None
    local_cpulist: str | None


def pci_function(sys_root: str, bdf: str) -> PciFunction | None:
    base = os.path.join(sys_root, PCI_DEVICES_DIR, bdf)
    dev = read(os.path.join(base, "device"))
    if dev.absent and not os.path.isdir(base):  # asked only then: one call less per function
        return None
    numa, cpus = (read(os.path.join(base, n)) for n in ("numa_node", "local_cpulist"))
    device_id = parse_hex(dev.text, dev.path) if dev.text is not None else None
    numa_node = parse_numa(numa.text, numa.path) if numa.text is not None else None
    return PciFunction(bdf, device_id, numa_node, (cpus.text or "").strip() or None)


def neuron_pci_functions(sys_root: str) -> tuple[PciFunction, ...]:
    """Every PCI function bound to the Neuron driver (what the host has,
    whatever a container was given)."""
    try:
        names = os.listdir(os.path.join(sys_root, PCI_DRIVER_DIR))
    except OSError:
        return ()
    out = []
    for name in sorted(names):
        if _BDF.match(name):
            fn = pci_function(sys_root, name)
            if fn is not None:
                out.append(fn)
    return tuple(out)


def dmi_product_name(sys_root: str) -> Reading:
    return read(os.path.join(sys_root, DMI_PRODUCT))


@dataclass(frozen=True)
class DevNode:
    index: int
    path: str
    usable: bool
    reason: str | None = None


def dev_nodes(dev_root: str) -> tuple[DevNode, ...]:
    """The /dev/neuronN entries and whether this process may open them for
    reading and writing (it never opens them: opening a device can act);
    `BadData` when two entries name one device (neuron1, neuron01), as
    `list_device_dirs` refuses the sysfs pair."""
    try:
        # scandir: an entry's kind comes with the listing, not from a stat of each
        with os.scandir(dev_root) as listing:
            entries = list(listing)
    except OSError:
        return ()
    out = []
    seen: dict[int, str] = {}
    for entry in sorted(entries, key=lambda e: e.name):
        m = _DEV.match(entry.name)
        if not m or len(m.group(1)) > 9:
            continue
        path = entry.path
        index = int(m.group(1))
        if index in seen:  # which of the two nodes is the device cannot be told
            raise limits.BadData(f"{seen[index]} and {path} both name Neuron device {index}")
        seen[index] = path
        if entry.is_dir():
            out.append(DevNode(index, path, False, "a directory, not a device"))
        elif not os.access(path, os.R_OK | os.W_OK):
            out.append(DevNode(index, path, False, "no read/write permission"))
        else:
            out.append(DevNode(index, path, True))
    return tuple(sorted(out, key=lambda n: n.index))


# ---------------------------------------------------------------------------
# Telemetry counters
# ---------------------------------------------------------------------------

ECC_FILES = ("mem_ecc_uncorrected", "sram_ecc_uncorrected", "mem_ecc_repairable_uncorrected")


def core_memory_used(neuron_root: str | Path, index: int, core: int) -> int | None:
    """Device memory in use on one physical core (`device_mem/total`)."""
    core_dir = os.path.join(neuron_root, f"neuron{index}", f"neuron_core{core}")
    r = read(os.path.join(core_dir, "stats", "memory_usage", "device_mem", "total"))
    if r.text is None:
        return None
    try:
        return parse_u64(r.text, r.path)
    except limits.BadData:
        return None


def ecc_uncorrected(neuron_root: str | Path, index: int) -> dict[str, int] | None:
    """Uncorrected ECC counts by file name; None when none of the files is readable."""
    hw = os.path.join(neuron_root, f"neuron{index}", "stats", "hardware")
    out: dict[str, int] = {}
    for name in ECC_FILES:
        r = read(os.path.join(hw, name))
        if r.text is None:
            continue
        try:
            out[name] = parse_u64(r.text, r.path)
        except limits.BadData:
            continue
    return out if out else None


# ---------------------------------------------------------------------------
# Health (Trainium3, driver 2.30.2.0): read by nothing but tests yet
# ---------------------------------------------------------------------------

HEALTH_STATUS_DIR = os.path.join("stats", "hardware", "health_status")
# `healthcheck_status_fields` in `neuron_sysfs_metrics.c` (2.30.2.0), in the
# order the driver prints them; `device_unreachable` when the registers
# cannot be read. The driver writes into a 512-byte buffer.
HEALTH_COMPONENTS = (
    "hbm",
    "firmware_service_api",
    "firmware_service_processor",
    "sram",
    "link_intraserver",
    "link_host",
    "link_efa",
    "link_interserver",
    "link_switch",
    "axi_fabric",
)
DEVICE_UNREACHABLE = "device_unreachable"
HEALTH_MAX_CHARS = 511
_COMPONENT = re.compile(r"^[a-z0-9_]{1,64}$")


@dataclass(frozen=True)
class UnhealthyComponents:
    """One reading of `unhealthy_components`."""

    components: tuple[str, ...]  # as printed, known or not
    unreachable: bool = False  # the driver could not read the health registers

    @property
    def healthy(self) -> bool:
        return not self.components and not self.unreachable

    @property
    def unknown(self) -> tuple[str, ...]:
        """Names not in the driver's table: kept (a newer driver may add
        components), for the caller to warn about."""
        return tuple(c for c in self.components if c not in HEALTH_COMPONENTS)


def parse_unhealthy_components(text: str, what: str) -> UnhealthyComponents:
    """'\\n' -> healthy; 'hbm,link_efa\\n' -> those two; 'device_unreachable\\n'."""
    value = text.strip()
    if len(value) > HEALTH_MAX_CHARS or not value.isascii():
        raise limits.BadData(f"{what} is {text[:80]!r}: not a list of component names")
    if not value:
        return UnhealthyComponents(())
    if value == DEVICE_UNREACHABLE:
        return UnhealthyComponents((), unreachable=True)
    names = tuple(value.split(","))
    for name in names:
        if not _COMPONENT.match(name) or name == DEVICE_UNREACHABLE:
            raise limits.BadData(f"{what} is {text[:80]!r}: {name!r} is not a component name")
    if len(set(names)) != len(names):
        raise limits.BadData(f"{what} is {text[:80]!r}: a component is listed twice")
    return UnhealthyComponents(names)


def unhealthy_components(neuron_root: str | Path, index: int) -> tuple[UnhealthyComponents | None, str | None]:
    """(reading, why there is none): none where the node is absent (drivers
    before 2.30, devices before Trainium3, or a moved node after 2.31) or
    unreadable. A value that does not fit the driver's format is `BadData`."""
    r = read(os.path.join(neuron_root, f"neuron{index}", HEALTH_STATUS_DIR, "unhealthy_components"))
    if r.refused:
        raise limits.BadData(f"{r.error}")
    if r.text is None:
        return None, f"{r.path}: {r.error}"
    return parse_unhealthy_components(r.text, r.path), None
