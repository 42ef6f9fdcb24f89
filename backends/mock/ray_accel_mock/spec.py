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

import os
import re
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray_accel_cuda.runtime import FAMILY as FAMILY_GPU
from ray_accel_neuron.limits import MAX_DEVICES as MAX_NEURON_DEVICES
from ray_accel_neuron.limits import MAX_LOGICAL_CORES
from ray_accel_neuron.runtime import FAMILY as FAMILY_NEURON

from ray_accel.core.devices import Device, DeviceError, validate_inventory
from ray_accel.core.errors import InputError
from ray_accel.core.reader import Cursor, ReadError, Style, parse_toml, read_file, show
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
    raise SpecError(f"bad topology {show(name)}: use {TOPOLOGIES}")


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


# A spec's refusals name the key in their own words after the place of its
# table (`host.toml [host]: devices must be ...`), so a field's path is its
# table's and each message begins with `{key}`.
SPEC = Style(child=lambda path, key: path, words={"size": "{key} has {count} entries, more than {limit}"})
POSITIVE = "{key} must be a positive integer, got {value}"
NON_NEGATIVE = "{key} must be a non-negative integer, got {value}"
TEXT = f"{{key}} must be a string of 1-{MAX_TEXT} printable characters, got {{value}}"
# Memory is a number of GiB (an integer or a float), read as bytes.
GIB_MUST = "{key} must be a finite, non-negative number of GiB, got {value}"
GIB_ABOVE = f"{{key}} = {{value}} is above the maximum {MAX_MEMORY_GIB} (1 PiB)"
NUMNODES = "Linux's MAX_NUMNODES"
NUMA_NODE = "{key} must be an integer >= -1, got {value}"
NUMA_ABOVE = f"{{key}} = {{value}} is above the maximum {MAX_NUMA_NODES - 1} ({NUMNODES}; -1: none)"
MAX_NC = "the Neuron driver's MAX_NC_PER_DEVICE"
UNKNOWN = "unknown key {value}; known keys are "


def _above(hi: int, limit: str) -> str:
    return f"{{key}} = {{value}} is above the maximum {hi} ({limit})"


def _label(node: Cursor, derived: bool = False) -> str | None:
    """A value that becomes a Ray label (the raylet writes an accelerator type
    with '-' for ' '), so it must follow Ray's label-value rule."""
    if node.data is None:
        return None
    value = node.text(MAX_TEXT, message=TEXT, printable=True)
    if not PARTITION_NAME.match(value.replace(" ", "-")):
        hint = " (with no accelerator_type it is the accelerator type: give accelerator_type)" if derived else ""
        node.fail(
            f"{node.key} {show(value)} is not a Ray label value{hint}: use 1-63 letters, digits, "
            "spaces, '-', '_' or '.', starting and ending with a letter or digit"
        )
    return value


def spec_from_table(data: Mapping[str, Any], source: str) -> HostSpec:
    """The host a parsed TOML spec describes, or a `SpecError` naming
    `source`, the field and its value. Every count is checked against its
    maximum before anything is built."""
    try:
        return _spec(Cursor(data, source, SPEC))
    except ReadError as e:
        raise SpecError(str(e)) from None


def _spec(top: Cursor) -> HostSpec:
    source = top.path
    top.only((*HOST_TABLES, "devices"), "unknown table or key {value}: a spec has [host] and, optionally, [[devices]]")
    given = [t for t in HOST_TABLES if t in top.mapping()]
    if len(given) > 1:
        top.fail("both [host] and [node] (its old name) are given: keep [host] only")
    table = given[0] if given else "host"
    if not given:
        top.fail("missing [host] table")
    host = Cursor(top.at(table).mapping("{key} must be a [{key}] table, got {value}"), f"{source} [{table}]", SPEC)
    host.only(HOST_KEYS, UNKNOWN + ", ".join(HOST_KEYS))
    family = host.at("family", None).one_of(
        (FAMILY_NEURON, FAMILY_GPU), "family must be 'neuron' or 'gpu', got {value}"
    )
    neuron = family == FAMILY_NEURON
    max_devices = MAX_DEVICES[family]
    device_limit = f"{DEVICE_LIMIT[family]} is {max_devices}"
    max_cores, cores_above = (
        (
            MAX_LOGICAL_CORES,
            _above(MAX_LOGICAL_CORES, f"at most {MAX_LOGICAL_CORES} NeuronCores per device: {MAX_NC}"),
        )
        if neuron
        else (1, _above(1, "a GPU is one schedulable unit"))
    )
    model_at = host.at("model", "Trainium" if neuron else "NVIDIA GPU")
    model = model_at.text(MAX_TEXT, message=TEXT, printable=True)
    name = host.at("name", Path(source).stem or "spec").text(MAX_TEXT, message=TEXT, printable=True)
    host_type = _label(host.at("accelerator_type", None))
    instance_type = _label(host.at("instance_type", None))
    default_cores = host.at("cores_per_device", 2 if neuron else 1).int(1, max_cores, POSITIVE, cores_above)
    default_mem = int(host.at("memory_gib", 32).number(0, MAX_MEMORY_GIB, GIB_MUST, GIB_ABOVE) * GIB)
    rows = top.mapping().get("devices")
    if rows is None:
        if "devices" not in host.mapping():
            host.fail(f"give devices = N (1-{max_devices}) or list the devices as [[devices]] tables")
        count = host.at("devices").int(1, max_devices, POSITIVE, _above(max_devices, device_limit))
        topology = host.at("topology", "none").text(MAX_TEXT, message=f"{{key}} must be {TOPOLOGIES}, got {{value}}")
        numa_nodes = host.at("numa_nodes", 1).int(1, MAX_NUMA_NODES, POSITIVE, _above(MAX_NUMA_NODES, NUMNODES))
        if host_type is None:
            _label(model_at, derived=True)
        try:
            return build_host(
                name, family, model, count, default_cores, default_mem, topology, numa_nodes, host_type, instance_type
            )
        except SpecError as e:
            host.fail(str(e))
        except DeviceError as e:
            top.fail(str(e))
    for key in GENERATED_ONLY:
        if key in host.mapping():
            host.fail(f"{key} shapes generated devices and cannot apply to [[devices]] listed: remove it")
    if not isinstance(rows, list) or not rows or not all(isinstance(row, dict) for row in rows):
        top.fail(f"devices must be a non-empty array of [[devices]] tables, got {show(rows)}")
    if len(rows) > max_devices:
        top.fail(f"{len(rows)} [[devices]] listed, above the maximum {max_devices} ({device_limit})")
    nodes = [Cursor(row, f"{source} [[devices]][{i}]", SPEC) for i, row in enumerate(rows)]
    ids: list[str] = []
    by_index: dict[int, str] = {}
    for row in nodes:
        row.only(DEVICE_KEYS, UNKNOWN + ", ".join(DEVICE_KEYS))
        index = row.at("index", len(ids)).int(0, max_devices - 1, NON_NEGATIVE, _above(max_devices - 1, device_limit))
        if index in by_index:
            row.fail(f"index {index} is taken by device {by_index[index]!r}")
        did = row.at("id", neuron_id(index) if neuron else gpu_uuid(name, index)).data
        if not isinstance(did, str) or not DEVICE_ID.match(did):
            row.fail(
                "id must be 1-95 letters, digits, '_', '.', ':' or '-', "
                f"starting with a letter or digit, got {show(did)}"
            )
        if did in ids:
            row.fail(f"duplicate device id {did!r}")
        ids.append(did)
        by_index[index] = did
    devices = []
    next_core = 0
    buses: dict[str, str] = {}
    for (index, did), row in zip(by_index.items(), nodes, strict=True):
        fields = row.mapping()
        cores = row.at("cores", default_cores).int(1, max_cores, POSITIVE, cores_above)
        memory = (
            int(row.at("memory_gib").number(0, MAX_MEMORY_GIB, GIB_MUST, GIB_ABOVE) * GIB)
            if "memory_gib" in fields
            else default_mem
        )
        row_model_at = row.at("model") if "model" in fields else model_at
        row_model = row_model_at.text(MAX_TEXT, message=TEXT, printable=True)
        row_type = _label(row.at("accelerator_type", None))
        if row_type is None and host_type and row_model == model:
            row_type = host_type
        elif row_type is None:
            # A device of another model than the host's is its own type.
            row_type = _label(row_model_at, derived=True)
        bus = (
            None
            if (n := row.at("pci_bus_id", None).optional()) is None
            else n.text(MAX_TEXT, message=TEXT, printable=True)
        )
        if bus is not None:
            if not PCI_BUS_ID.match(bus):
                row.fail(f"pci_bus_id must be a PCI address like 0000:10:1c.0, got {show(bus)}")
            # 0000:10:1c.0 and 00000000:10:1C.0 are one address.
            domain, rest = bus.split(":", 1)
            key = f"{int(domain, 16):08x}:{rest.lower()}"
            if key in buses:
                row.fail(f"pci_bus_id {bus!r} is taken by device {buses[key]!r}")
            buses[key] = did
        numa_node = row.at("numa_node", 0).int(-1, MAX_NUMA_NODES - 1, NUMA_NODE, NUMA_ABOVE)
        healthy = row.at("healthy", True).bool("{key} must be true or false, got {value}")
        peers: list[str] = []
        for p in row.at("peers", []).list(message="peers must be an array of device indexes or ids, got {value}"):
            value = p.data
            peer = (
                by_index.get(value)
                if type(value) is int
                else value
                if isinstance(value, str) and value in ids
                else None
            )
            if peer is None:
                p.fail(f"peer {show(p.data)} names no device of this spec")
            if peer in peers:
                p.fail(f"peer {show(p.data)} is listed twice")
            peers.append(peer)
        devices.append(
            Device(
                id=did,
                family=family,
                index=index,
                model=row_model,
                memory_bytes=memory,
                core_ids=tuple(range(next_core, next_core + cores)) if neuron else (index,),
                numa_node=numa_node,
                pci_bus_id=bus,
                peers=tuple(peers),
                serial=None
                if (n := row.at("serial", None).optional()) is None
                else n.text(MAX_TEXT, message=TEXT, printable=True),
                architecture=model,
                attributes={"mock": "true", "healthy": str(healthy).lower()},
                accelerator_type=row_type,
            )
        )
        next_core += cores if neuron else 0
    try:
        inventory = validate_inventory(devices)
    except DeviceError as e:
        top.fail(str(e))
    kinds = {d.accelerator_type for d in inventory}
    return HostSpec(name, family, model, kinds.pop() if len(kinds) == 1 else None, instance_type, inventory)


def _read_table(value: str, shown: str) -> dict[str, Any]:
    """The parsed TOML of a spec file, read bounded and without blocking."""
    try:
        raw = read_file(value, f"cannot read mock spec file {shown}", MAX_SPEC_BYTES, follow=True)
        if raw is None:
            raise SpecError(f"mock spec file {shown} does not exist")
        return parse_toml(raw, shown, "malformed TOML in mock spec {source}: {error}")
    except ReadError as e:
        raise SpecError(str(e)) from None


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
