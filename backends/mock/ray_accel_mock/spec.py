"""Declarative host specs: the presets, and TOML files of the same shape.

Shapes follow the hardware facts in DESIGN.md: trn1.32xlarge is 16 devices x
2 cores on a 4x4 torus (device 0 peers 12, 3, 4, 1); inf2.48xlarge is 12 x 2 in
a ring; trn2.48xlarge is 16 x 8 physical cores shown as 4 logical cores each
(logical core size 2); the GPU presets are 8 GPUs all linked through NVSwitch.
Trainium3 (the Neuron docs' trainium3.rst and trn3-arch.rst: 8 physical
NeuronCore-v4 and 144 GiB per device, linked all to all through
NeuronSwitch-v1) comes in the three shapes the Neuron driver knows
(aws-neuron-driver 2.30.2.0, `v4/neuron_dhal_v4.c`): `trn3.48xlarge` (16
devices, a Gen1 UltraServer server), `trn3e.24xlarge` (4 devices, a Gen2
UltraServer server) and `trn3pd98.3xlarge` (1 device). Every Trainium3
instance name is known only from that driver source: the Neuron docs name
none, so which names are sold is not known. Each device shows 4 logical
cores: the default logical core size 2 is seen only in TorchNeuron's
pre-release source. Their NUMA layout is not published: one NUMA node.
`mixed-v100-a100` is a host of two GPU models, one V100 and two NVLinked
A100s, the shape of Ray's own NVML test data (GPU_MOCK_DATA in
python/ray/tests/accelerators/test_nvidia_gpu.py: two A100s and a V100), with
a UUID per GPU: Ray 2.60 would type the whole host (one Ray node) by its GPU 0.

A TOML spec is input the user wrote, so it is read strictly: the file through
`ray_accel.core.files` (a regular file of at most `MAX_SPEC_BYTES`; a FIFO, a
device or a directory is refused at once), every key known (a field we could
not honour is refused by name, never ignored), every value of its type and
within the maxima below, checked before anything is built. Anything else is a
`SpecError` (an `InputError`: exit 2) naming the file, the field and the value.
"""

from __future__ import annotations

import math
import os
import re
import sys
import tomllib
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray_accel_cuda.runtime import FAMILY as FAMILY_GPU
from ray_accel_neuron.limits import MAX_DEVICES as MAX_NEURON_DEVICES
from ray_accel_neuron.limits import MAX_LOGICAL_CORES
from ray_accel_neuron.runtime import FAMILY as FAMILY_NEURON

from ray_accel.core import files
from ray_accel.core.devices import Device, DeviceError, validate_inventory
from ray_accel.core.errors import InputError
from ray_accel.core.validate import PARTITION_NAME

GIB = 1024**3

# The largest spec file read: a 64-device listing with every link is a few KiB.
MAX_SPEC_BYTES = 1024**2
# GPUs per host: NV_MAX_DEVICES = 32, "the maximum number of GPUs supported in
# a single system", in NVIDIA's src/common/sdk/nvidia/inc/nvlimits.h
# (NVIDIA/open-gpu-kernel-modules @ 1739a20efc4acb55fd1dc53dcc66057b70c2613c,
# driver 515.43.04). Neuron devices per host: the driver's
# MAX_NEURON_DEVICE_COUNT (ray_accel_neuron.limits).
MAX_GPUS = 32
MAX_DEVICES = {FAMILY_NEURON: MAX_NEURON_DEVICES, FAMILY_GPU: MAX_GPUS}
DEVICE_LIMIT = {
    FAMILY_NEURON: "the Neuron driver's MAX_NEURON_DEVICE_COUNT",
    FAMILY_GPU: "the NVIDIA driver's NV_MAX_DEVICES",
}
# NUMA node ids: Linux's MAX_NUMNODES is 1 << CONFIG_NODES_SHIFT, and
# NODES_SHIFT is at most 10 (arch/x86/Kconfig, arch/arm64/Kconfig); -1 is
# NUMA_NO_NODE (include/linux/numa.h), what sysfs shows for "no node".
MAX_NUMA_NODES = 1 << 10
# Memory per device: our own bound (1 PiB, far past any accelerator), so the
# byte count stays an exact integer well inside int64 for metrics and JSON.
MAX_MEMORY_GIB = 1024**2
# Free text (model, name, serial): NVML's name buffer is
# NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96 bytes with the terminating NUL (nvml.h).
MAX_TEXT = 95
# A device id: a GPU UUID (GPU-..., MIG-...), neuron:N, or a name of the
# user's; no spaces, commas or '=' (ids are joined into lists and labels).
DEVICE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,94}$")
# A PCI address as sysfs (0000:10:1c.0) or NVML (00000000:10:1C.0) writes it.
PCI_BUS_ID = re.compile(r"^(?:[0-9A-Fa-f]{4}|[0-9A-Fa-f]{8}):[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
TORUS = re.compile(r"^torus:([1-9][0-9]{0,2})x([1-9][0-9]{0,2})$")
TOPOLOGIES = "torus:RxC, ring, all-to-all or none"

HOST_KEYS = (
    "family",
    "model",
    "name",
    "accelerator_type",
    "instance_type",
    "cores_per_device",
    "memory_gib",
    "devices",
    "topology",
    "numa_nodes",
)
# The spec's table of the host as a whole; [node] is its old name, still read.
HOST_TABLES = ("host", "node")
# Keys of [host] that shape generated devices: with [[devices]] listed they
# could not be honoured, so they are refused rather than ignored.
GENERATED_ONLY = ("devices", "topology", "numa_nodes")
DEVICE_KEYS = (
    "id",
    "index",
    "model",
    "accelerator_type",
    "cores",
    "memory_gib",
    "numa_node",
    "pci_bus_id",
    "serial",
    "peers",
    "healthy",
)


class SpecError(InputError):
    """A mock spec (preset name or TOML file) that cannot be used."""


@dataclass(frozen=True)
class HostSpec:
    name: str
    family: str
    model: str
    accelerator_type: str | None  # None: the host's devices are of several types
    instance_type: str | None
    devices: tuple[Device, ...]


def torus_peers(index: int, rows: int, cols: int) -> list[int]:
    """Neighbours on a rows x cols torus in the order the Neuron driver lists them."""
    r, c = divmod(index, cols)
    cand = [
        ((r - 1) % rows) * cols + c,
        r * cols + (c - 1) % cols,
        ((r + 1) % rows) * cols + c,
        r * cols + (c + 1) % cols,
    ]
    out: list[int] = []
    for p in cand:
        if p != index and p not in out:
            out.append(p)
    return out


def ring_peers(index: int, count: int) -> list[int]:
    out: list[int] = []
    for p in ((index - 1) % count, (index + 1) % count):
        if p != index and p not in out:
            out.append(p)
    return out


def neuron_id(index: int) -> str:
    return f"neuron:{index}"


def gpu_uuid(instance: str, index: int) -> str:
    # Deterministic, but in NVML's own format, so nothing downstream can tell.
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"ray-accel-mock/{instance}/{index}"))


def _topology(name: str, count: int) -> Callable[[int], list[int]]:
    if name == "none":
        return lambda i: []
    if name == "ring":
        return lambda i: ring_peers(i, count)
    if name == "all-to-all":
        return lambda i: [j for j in range(count) if j != i]
    torus = TORUS.match(name)
    if torus is not None:
        rows, cols = int(torus[1]), int(torus[2])
        if rows * cols != count:
            raise SpecError(f"topology {name!r} needs {rows * cols} devices, spec has {count}")
        return lambda i: torus_peers(i, rows, cols)
    raise SpecError(f"bad topology {_show(name)}: use {TOPOLOGIES}")


def build_host(
    name: str,
    family: str,
    model: str,
    count: int,
    cores_per_device: int,
    memory_bytes: int,
    topology: str,
    numa_nodes: int = 1,
    accelerator_type: str | None = None,
    instance_type: str | None = None,
    physical_cores: int | None = None,
) -> HostSpec:
    peers_of = _topology(topology, count)
    per_numa = max(1, -(-count // numa_nodes))
    ids = [neuron_id(i) if family == FAMILY_NEURON else gpu_uuid(name, i) for i in range(count)]
    devices = []
    for i in range(count):
        attrs = {"mock": "true"}
        if family == FAMILY_NEURON:
            phys = physical_cores or cores_per_device
            attrs["physical_cores"] = str(phys)
            attrs["logical_core_size"] = str(phys // cores_per_device)
            core_ids = tuple(range(i * cores_per_device, (i + 1) * cores_per_device))
        else:
            core_ids = (i,)
        devices.append(
            Device(
                id=ids[i],
                family=family,
                index=i,
                model=model,
                memory_bytes=memory_bytes,
                core_ids=core_ids,
                numa_node=i // per_numa,
                pci_bus_id=f"0000:{0x10 + i:02x}:1e.0"
                if family == FAMILY_NEURON
                else f"0000:{0x10 + 0x10 * (i // 2):02x}:{0x1C + i % 2:02x}.0",
                peers=tuple(ids[p] for p in peers_of(i)),
                serial=f"MOCK{i:04d}",
                architecture=model,
                attributes=attrs,
                accelerator_type=accelerator_type or model,
            )
        )
    return HostSpec(
        name=name,
        family=family,
        model=model,
        accelerator_type=accelerator_type or model,
        instance_type=instance_type,
        devices=validate_inventory(devices),
    )


def build_mixed_gpus(name: str, models: list[tuple[str, str, int, int]]) -> HostSpec:
    """A GPU host of several models, each `(model, accelerator type, memory,
    count)` in index order, each model on its own NUMA node, its GPUs NVLinked
    to each other and to no GPU of another model."""
    rows = [(i, n, row) for n, row in enumerate(models) for i in range(row[3])]
    ids = [gpu_uuid(name, i) for i in range(len(rows))]
    devices = []
    for index, (_, numa, (model, kind, memory, _)) in enumerate(rows):
        peers = tuple(ids[j] for j, (_, other, _) in enumerate(rows) if other == numa and j != index)
        devices.append(
            Device(
                id=ids[index],
                family=FAMILY_GPU,
                index=index,
                model=model,
                memory_bytes=memory,
                core_ids=(index,),
                numa_node=numa,
                pci_bus_id=f"0000:{0x10 + 0x10 * index:02x}:00.0",
                peers=peers,
                serial=f"MOCK{index:04d}",
                architecture=model,
                attributes={"mock": "true"},
                accelerator_type=kind,
            )
        )
    kinds = {kind for _, kind, _, _ in models}
    return HostSpec(
        name=name,
        family=FAMILY_GPU,
        model=" + ".join(model for model, _, _, _ in models),
        accelerator_type=kinds.pop() if len(kinds) == 1 else None,
        instance_type=None,
        devices=validate_inventory(devices),
    )


PRESETS: dict[str, Callable[[], HostSpec]] = {
    "trn1.2xlarge": lambda: build_host(
        "trn1.2xlarge", FAMILY_NEURON, "Trainium", 1, 2, 32 * GIB, "none", 1, instance_type="trn1.2xlarge"
    ),
    "trn1.32xlarge": lambda: build_host(
        "trn1.32xlarge", FAMILY_NEURON, "Trainium", 16, 2, 32 * GIB, "torus:4x4", 2, instance_type="trn1.32xlarge"
    ),
    "inf2.48xlarge": lambda: build_host(
        "inf2.48xlarge", FAMILY_NEURON, "Inferentia2", 12, 2, 32 * GIB, "ring", 2, instance_type="inf2.48xlarge"
    ),
    "trn2.48xlarge": lambda: build_host(
        "trn2.48xlarge",
        FAMILY_NEURON,
        "Trainium2",
        16,
        4,
        96 * GIB,
        "torus:4x4",
        2,
        instance_type="trn2.48xlarge",
        physical_cores=8,
    ),
    "trn3.48xlarge": lambda: build_host(
        "trn3.48xlarge",
        FAMILY_NEURON,
        "Trainium3",
        16,
        4,
        144 * GIB,
        "all-to-all",
        1,
        instance_type="trn3.48xlarge",
        physical_cores=8,
    ),
    "trn3e.24xlarge": lambda: build_host(
        "trn3e.24xlarge",
        FAMILY_NEURON,
        "Trainium3",
        4,
        4,
        144 * GIB,
        "all-to-all",
        1,
        instance_type="trn3e.24xlarge",
        physical_cores=8,
    ),
    "trn3pd98.3xlarge": lambda: build_host(
        "trn3pd98.3xlarge",
        FAMILY_NEURON,
        "Trainium3",
        1,
        4,
        144 * GIB,
        "none",
        1,
        instance_type="trn3pd98.3xlarge",
        physical_cores=8,
    ),
    "p4d.24xlarge": lambda: build_host(
        "p4d.24xlarge", FAMILY_GPU, "NVIDIA A100-SXM4-40GB", 8, 1, 40 * GIB, "all-to-all", 2, "A100", "p4d.24xlarge"
    ),
    "p5.48xlarge": lambda: build_host(
        "p5.48xlarge", FAMILY_GPU, "NVIDIA H100 80GB HBM3", 8, 1, 80 * GIB, "all-to-all", 2, "H100", "p5.48xlarge"
    ),
    "mixed-v100-a100": lambda: build_mixed_gpus(
        "mixed-v100-a100",
        [("Tesla V100-SXM2-16GB", "V100", 16 * GIB, 1), ("NVIDIA A100-SXM4-40GB", "A100", 40 * GIB, 2)],
    ),
}


def _show(value: object) -> str:
    """`repr(value)`, cut short: error messages stay one readable line."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an integer past Python's str() digit limit
        text = f"<{type(value).__name__} too large to show>"
    return text if len(text) <= 60 else text[:57] + "..."


def _known_keys(table: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in known:
            raise SpecError(f"{where}: unknown key {_show(key)}; known keys are {', '.join(known)}")


def _int(table: Mapping[str, Any], key: str, where: str, default: object, lo: int, hi: int, limit: str) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        must = {1: "a positive integer", 0: "a non-negative integer"}.get(lo, f"an integer >= {lo}")
        raise SpecError(f"{where}: {key} must be {must}, got {_show(value)}")
    if value > hi:
        raise SpecError(f"{where}: {key} = {_show(value)} is above the maximum {hi} ({limit})")
    return value


def _gib(table: Mapping[str, Any], key: str, where: str, default: float) -> int:
    """A memory size in GiB (an integer or a float), as bytes."""
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{where}: {key} must be a number of GiB, got {_show(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(f"{where}: {key} must be a finite number of GiB, got {_show(value)}")
    if value < 0:
        raise SpecError(f"{where}: {key} must not be negative, got {_show(value)}")
    if value > MAX_MEMORY_GIB:
        raise SpecError(f"{where}: {key} = {_show(value)} is above the maximum {MAX_MEMORY_GIB} (1 PiB)")
    return int(value * GIB)


def _text(table: Mapping[str, Any], key: str, where: str) -> str | None:
    """A string of printable characters, or None where absent."""
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT or not value.isprintable():
        raise SpecError(f"{where}: {key} must be a string of 1-{MAX_TEXT} printable characters, got {_show(value)}")
    return value


def _text_or(table: Mapping[str, Any], key: str, where: str, default: str) -> str:
    value = _text(table, key, where)
    return default if value is None else value


def _label(value: str, where: str, key: str, derived: bool = False) -> str:
    """A value that becomes a Ray label (the raylet writes an accelerator type
    with '-' for ' '), so it must follow Ray's label-value rule."""
    if not PARTITION_NAME.match(value.replace(" ", "-")):
        hint = " (with no accelerator_type it is the accelerator type: give accelerator_type)" if derived else ""
        raise SpecError(
            f"{where}: {key} {_show(value)} is not a Ray label value{hint}: use 1-63 letters, digits, "
            "spaces, '-', '_' or '.', starting and ending with a letter or digit"
        )
    return value


def _optional_label(table: Mapping[str, Any], key: str, where: str) -> str | None:
    value = _text(table, key, where)
    return None if value is None else _label(value, where, key)


def _bool(table: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise SpecError(f"{where}: {key} must be true or false, got {_show(value)}")
    return value


def _peers(row: Mapping[str, Any], where: str, ids: list[str], by_index: Mapping[int, str]) -> tuple[str, ...]:
    """`peers` names devices by index or id; each at most once."""
    value = row.get("peers", [])
    if not isinstance(value, list):
        raise SpecError(f"{where}: peers must be an array of device indexes or ids, got {_show(value)}")
    known = set(ids)
    out: list[str] = []
    for p in value:
        if isinstance(p, int) and not isinstance(p, bool) and p in by_index:
            peer = by_index[p]
        elif isinstance(p, str) and p in known:
            peer = p
        else:
            raise SpecError(f"{where}: peer {_show(p)} names no device of this spec")
        if peer in out:
            raise SpecError(f"{where}: peer {_show(p)} is listed twice")
        out.append(peer)
    return tuple(out)


def spec_from_table(data: Mapping[str, Any], source: str) -> HostSpec:
    """The host a parsed TOML spec describes, or a `SpecError` naming
    `source`, the field and its value. Every count is checked against its
    maximum before anything is built."""
    for key in data:
        if key not in (*HOST_TABLES, "devices"):
            raise SpecError(
                f"{source}: unknown table or key {_show(key)}: a spec has [host] and, optionally, [[devices]]"
            )
    given = [t for t in HOST_TABLES if t in data]
    if len(given) > 1:
        raise SpecError(f"{source}: both [host] and [node] (its old name) are given: keep [host] only")
    table = given[0] if given else "host"
    host = data.get(table)
    if not isinstance(host, dict):
        raise SpecError(
            f"{source}: missing [host] table"
            if host is None
            else f"{source}: {table} must be a [{table}] table, got {_show(host)}"
        )
    where = f"{source} [{table}]"
    _known_keys(host, HOST_KEYS, where)
    family = host.get("family")
    if family not in (FAMILY_NEURON, FAMILY_GPU):
        raise SpecError(f"{where}: family must be 'neuron' or 'gpu', got {_show(family)}")
    neuron = family == FAMILY_NEURON
    max_devices = MAX_DEVICES[family]
    device_limit = f"{DEVICE_LIMIT[family]} is {max_devices}"
    max_cores, core_limit = (
        (
            MAX_LOGICAL_CORES,
            f"at most {MAX_LOGICAL_CORES} NeuronCores per device: the Neuron driver's MAX_NC_PER_DEVICE",
        )
        if neuron
        else (1, "a GPU is one schedulable unit")
    )
    model = _text_or(host, "model", where, "Trainium" if neuron else "NVIDIA GPU")
    name = _text_or(host, "name", where, Path(source).stem or "spec")
    host_type = _optional_label(host, "accelerator_type", where)
    instance_type = _optional_label(host, "instance_type", where)
    default_cores = _int(host, "cores_per_device", where, 2 if neuron else 1, 1, max_cores, core_limit)
    default_mem = _gib(host, "memory_gib", where, 32)
    rows = data.get("devices")
    if rows is None:
        if "devices" not in host:
            raise SpecError(f"{where}: give devices = N (1-{max_devices}) or list the devices as [[devices]] tables")
        count = _int(host, "devices", where, None, 1, max_devices, device_limit)
        topology = host.get("topology", "none")
        if not isinstance(topology, str):
            raise SpecError(f"{where}: topology must be {TOPOLOGIES}, got {_show(topology)}")
        numa_nodes = _int(host, "numa_nodes", where, 1, 1, MAX_NUMA_NODES, "Linux's MAX_NUMNODES")
        if host_type is None:
            _label(model, where, "model", derived=True)
        try:
            return build_host(
                name, family, model, count, default_cores, default_mem, topology, numa_nodes, host_type, instance_type
            )
        except SpecError as e:
            raise SpecError(f"{where}: {e}") from None
        except DeviceError as e:
            raise SpecError(f"{source}: {e}") from None
    for key in GENERATED_ONLY:
        if key in host:
            raise SpecError(
                f"{where}: {key} shapes generated devices and cannot apply to [[devices]] listed: remove it"
            )
    if not isinstance(rows, list) or not rows or not all(isinstance(row, dict) for row in rows):
        raise SpecError(f"{source}: devices must be a non-empty array of [[devices]] tables, got {_show(rows)}")
    if len(rows) > max_devices:
        raise SpecError(f"{source}: {len(rows)} [[devices]] listed, above the maximum {max_devices} ({device_limit})")
    wheres = [f"{source} [[devices]][{i}]" for i in range(len(rows))]
    ids: list[str] = []
    by_index: dict[int, str] = {}
    for row, at in zip(rows, wheres, strict=True):
        _known_keys(row, DEVICE_KEYS, at)
        index = _int(row, "index", at, len(ids), 0, max_devices - 1, device_limit)
        if index in by_index:
            raise SpecError(f"{at}: index {index} is taken by device {by_index[index]!r}")
        did = row.get("id", neuron_id(index) if neuron else gpu_uuid(name, index))
        if not isinstance(did, str) or not DEVICE_ID.match(did):
            raise SpecError(
                f"{at}: id must be 1-95 letters, digits, '_', '.', ':' or '-', "
                f"starting with a letter or digit, got {_show(did)}"
            )
        if did in ids:
            raise SpecError(f"{at}: duplicate device id {did!r}")
        ids.append(did)
        by_index[index] = did
    devices = []
    next_core = 0
    buses: dict[str, str] = {}
    for (index, did), row, at in zip(by_index.items(), rows, wheres, strict=True):
        cores = _int(row, "cores", at, default_cores, 1, max_cores, core_limit)
        memory = _gib(row, "memory_gib", at, 0) if "memory_gib" in row else default_mem
        row_model = _text_or(row, "model", at, model)
        row_type = _optional_label(row, "accelerator_type", at)
        if row_type is None and host_type and row_model == model:
            row_type = host_type
        elif row_type is None:
            # A device of another model than the host's is its own type.
            row_type = _label(row_model, at if "model" in row else where, "model", derived=True)
        bus = _text(row, "pci_bus_id", at)
        if bus is not None:
            if not PCI_BUS_ID.match(bus):
                raise SpecError(f"{at}: pci_bus_id must be a PCI address like 0000:10:1c.0, got {_show(bus)}")
            # 0000:10:1c.0 and 00000000:10:1C.0 are one address.
            domain, rest = bus.split(":", 1)
            key = f"{int(domain, 16):08x}:{rest.lower()}"
            if key in buses:
                raise SpecError(f"{at}: pci_bus_id {bus!r} is taken by device {buses[key]!r}")
            buses[key] = did
        healthy = _bool(row, "healthy", at, True)
        devices.append(
            Device(
                id=did,
                family=family,
                index=index,
                model=row_model,
                memory_bytes=memory,
                core_ids=tuple(range(next_core, next_core + cores)) if neuron else (index,),
                numa_node=_int(row, "numa_node", at, 0, -1, MAX_NUMA_NODES - 1, "Linux's MAX_NUMNODES; -1: none"),
                pci_bus_id=bus,
                peers=_peers(row, at, ids, by_index),
                serial=_text(row, "serial", at),
                architecture=model,
                attributes={"mock": "true", "healthy": str(healthy).lower()},
                accelerator_type=row_type,
            )
        )
        next_core += cores if neuron else 0
    try:
        inventory = validate_inventory(devices)
    except DeviceError as e:
        raise SpecError(f"{source}: {e}") from None
    kinds = {d.accelerator_type for d in inventory}
    return HostSpec(name, family, model, kinds.pop() if len(kinds) == 1 else None, instance_type, inventory)


def _read_table(value: str, shown: str) -> dict[str, Any]:
    """The parsed TOML of a spec file, read bounded and without blocking."""
    try:
        raw = files.read_bytes(value, MAX_SPEC_BYTES)
    except FileNotFoundError:
        raise SpecError(f"mock spec file {shown} does not exist") from None
    except files.UnreadableFile as e:
        raise SpecError(f"cannot use mock spec file: {files.describe(e)}") from None
    except OSError as e:
        raise SpecError(f"cannot read mock spec file {shown}: {files.describe(e)}") from None
    except ValueError as e:  # a NUL in the path
        raise SpecError(f"bad mock spec path {shown}: {e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(f"mock spec file {shown} is not UTF-8 text (byte {e.start})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"malformed TOML in mock spec {shown}: {e}") from None
    except RecursionError:
        raise SpecError(f"malformed TOML in mock spec {shown}: arrays or tables nested too deeply") from None
    except ValueError:  # tomllib lets int()'s 4300-digit limit through
        raise SpecError(f"malformed TOML in mock spec {shown}: a number too long to read") from None


def load_spec(value: str) -> HostSpec:
    """A preset name (``trn1.32xlarge``) or the path of a TOML spec file."""
    if value in PRESETS:
        return PRESETS[value]()
    if value.endswith(".toml") or os.sep in value or os.path.lexists(value):
        shown = repr(value)
        data = _read_table(value, shown)
        if "node" in data:  # on stderr only: never inside a command's --json
            print(f"warning: mock spec {shown}: [node] is deprecated: it is the old name of [host]", file=sys.stderr)
        return spec_from_table(data, value if value.isprintable() else shown)
    raise SpecError(f"unknown mock preset {value!r}: choose one of {', '.join(PRESETS)} or give a .toml file")
