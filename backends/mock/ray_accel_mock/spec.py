"""Declarative node specs: the presets, and TOML files of the same shape.

Shapes follow the hardware facts in DESIGN.md: trn1.32xlarge is 16 devices x
2 cores on a 4x4 torus (device 0 peers 12, 3, 4, 1); inf2.48xlarge is 12 x 2 in
a ring; trn2.48xlarge is 16 x 8 physical cores shown as 4 logical cores each
(logical core size 2); the GPU presets are 8 GPUs all linked through NVSwitch.
`mixed-v100-a100` is a node of two GPU models, one V100 and two NVLinked
A100s, the shape of Ray's own NVML test data (GPU_MOCK_DATA in
python/ray/tests/accelerators/test_nvidia_gpu.py: two A100s and a V100), with
a UUID per GPU: Ray 2.60 would type the whole node by its GPU 0.
"""

from __future__ import annotations

import tomllib
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray_accel_neuron.limits import MAX_LOGICAL_CORES

from ray_accel.core.devices import FAMILY_GPU, FAMILY_NEURON, Device, DeviceError, validate_inventory
from ray_accel.core.errors import InputError

GIB = 1024**3


class SpecError(InputError):
    """A mock spec (preset name or TOML file) that cannot be used."""


@dataclass(frozen=True)
class NodeSpec:
    name: str
    family: str
    model: str
    accelerator_type: str | None  # None: the node's devices are of several types
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
    if name.startswith("torus:"):
        try:
            rows, cols = (int(x) for x in name.removeprefix("torus:").split("x"))
        except ValueError:
            raise SpecError(f"bad topology {name!r}: use torus:RxC, ring, all-to-all or none") from None
        if rows * cols != count:
            raise SpecError(f"topology {name!r} needs {rows * cols} devices, spec has {count}")
        return lambda i: torus_peers(i, rows, cols)
    raise SpecError(f"bad topology {name!r}: use torus:RxC, ring, all-to-all or none")


def build_node(
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
) -> NodeSpec:
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
    return NodeSpec(
        name=name,
        family=family,
        model=model,
        accelerator_type=accelerator_type or model,
        instance_type=instance_type,
        devices=validate_inventory(devices),
    )


def build_mixed_gpus(name: str, models: list[tuple[str, str, int, int]]) -> NodeSpec:
    """A GPU node of several models, each `(model, accelerator type, memory,
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
    return NodeSpec(
        name=name,
        family=FAMILY_GPU,
        model=" + ".join(model for model, _, _, _ in models),
        accelerator_type=kinds.pop() if len(kinds) == 1 else None,
        instance_type=None,
        devices=validate_inventory(devices),
    )


PRESETS: dict[str, Callable[[], NodeSpec]] = {
    "trn1.2xlarge": lambda: build_node(
        "trn1.2xlarge", FAMILY_NEURON, "Trainium", 1, 2, 32 * GIB, "none", 1, instance_type="trn1.2xlarge"
    ),
    "trn1.32xlarge": lambda: build_node(
        "trn1.32xlarge", FAMILY_NEURON, "Trainium", 16, 2, 32 * GIB, "torus:4x4", 2, instance_type="trn1.32xlarge"
    ),
    "inf2.48xlarge": lambda: build_node(
        "inf2.48xlarge", FAMILY_NEURON, "Inferentia2", 12, 2, 32 * GIB, "ring", 2, instance_type="inf2.48xlarge"
    ),
    "trn2.48xlarge": lambda: build_node(
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
    "p4d.24xlarge": lambda: build_node(
        "p4d.24xlarge", FAMILY_GPU, "NVIDIA A100-SXM4-40GB", 8, 1, 40 * GIB, "all-to-all", 2, "A100", "p4d.24xlarge"
    ),
    "p5.48xlarge": lambda: build_node(
        "p5.48xlarge", FAMILY_GPU, "NVIDIA H100 80GB HBM3", 8, 1, 80 * GIB, "all-to-all", 2, "H100", "p5.48xlarge"
    ),
    "mixed-v100-a100": lambda: build_mixed_gpus(
        "mixed-v100-a100",
        [("Tesla V100-SXM2-16GB", "V100", 16 * GIB, 1), ("NVIDIA A100-SXM4-40GB", "A100", 40 * GIB, 2)],
    ),
}


def _positive_int(
    table: Mapping[str, Any], key: str, where: str, default: int | None = None, hi: int | None = None
) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SpecError(f"{where}: {key} must be a positive integer, got {value!r}")
    if hi is not None and value > hi:
        raise SpecError(f"{where}: {key} = {value} is above the maximum {hi}")
    return value


def _from_toml(path: Path, data: Mapping[str, Any]) -> NodeSpec:
    node = data.get("node")
    if not isinstance(node, dict):
        raise SpecError(f"{path}: missing [node] table")
    family = node.get("family")
    if family not in (FAMILY_NEURON, FAMILY_GPU):
        raise SpecError(f"{path}: [node] family must be 'neuron' or 'gpu', got {family!r}")
    model = str(node.get("model", "Trainium" if family == FAMILY_NEURON else "NVIDIA GPU"))
    name = str(node.get("name", path.stem))
    # A NeuronCore count past the driver's MAX_NC_PER_DEVICE is refused, not
    # expanded into a list of that many ids.
    max_cores = MAX_LOGICAL_CORES if family == FAMILY_NEURON else None
    default_cores = _positive_int(
        node, "cores_per_device", f"{path} [node]", 2 if family == FAMILY_NEURON else 1, max_cores
    )
    default_mem = int(float(node.get("memory_gib", 32)) * GIB)
    rows = data.get("devices")
    if rows is None:
        count = _positive_int(node, "devices", f"{path} [node]")
        spec = build_node(
            name,
            family,
            model,
            count,
            default_cores,
            default_mem,
            str(node.get("topology", "none")),
            _positive_int(node, "numa_nodes", f"{path} [node]", 1),
            node.get("accelerator_type"),
            node.get("instance_type"),
        )
        return spec
    if not isinstance(rows, list) or not rows:
        raise SpecError(f"{path}: [[devices]] must be a non-empty array of tables")
    devices = []
    next_core = 0
    ids: list[str] = []
    for i, row in enumerate(rows):
        where = f"{path} device #{i}"
        if not isinstance(row, dict):
            raise SpecError(f"{where}: must be a table")
        index = row.get("index", i)
        did = str(row.get("id", neuron_id(index) if family == FAMILY_NEURON else gpu_uuid(name, index)))
        ids.append(did)
    for i, row in enumerate(rows):
        where = f"{path} device {ids[i]!r}"
        cores = _positive_int(row, "cores", where, default_cores, max_cores)
        mem_gib = row.get("memory_gib")
        if mem_gib is not None and (not isinstance(mem_gib, (int, float)) or mem_gib < 0):
            raise SpecError(f"{where}: memory_gib must be a non-negative number, got {mem_gib!r}")
        peers = []
        for p in row.get("peers", []):
            if isinstance(p, int) and not isinstance(p, bool) and 0 <= p < len(ids):
                peers.append(ids[p])
            elif isinstance(p, str) and p in ids:
                peers.append(p)
            else:
                raise SpecError(f"{where}: peer {p!r} names no device of this spec")
        index = row.get("index", i)
        core_ids = tuple(range(next_core, next_core + cores)) if family == FAMILY_NEURON else (index,)
        next_core += cores if family == FAMILY_NEURON else 0
        row_model = str(row.get("model", model))
        node_type = node.get("accelerator_type")
        devices.append(
            Device(
                id=ids[i],
                family=family,
                index=index,
                model=row_model,
                memory_bytes=int(mem_gib * GIB) if mem_gib is not None else default_mem,
                core_ids=core_ids,
                numa_node=int(row.get("numa_node", 0)),
                pci_bus_id=row.get("pci_bus_id"),
                peers=tuple(peers),
                serial=row.get("serial"),
                architecture=model,
                attributes={"mock": "true", "healthy": str(bool(row.get("healthy", True))).lower()},
                # A device of the node's model has the node's type; another model is its own type.
                accelerator_type=str(
                    row.get("accelerator_type", node_type if node_type and row_model == model else row_model)
                ),
            )
        )
    try:
        inventory = validate_inventory(devices)
    except DeviceError as e:
        raise SpecError(f"{path}: {e}") from None
    kinds = {d.accelerator_type for d in inventory}
    node_kind = str(node.get("accelerator_type", model)) if len(kinds) == 1 else None
    return NodeSpec(name, family, model, node_kind, node.get("instance_type"), inventory)


def load_spec(value: str) -> NodeSpec:
    """A preset name (``trn1.32xlarge``) or the path of a TOML spec file."""
    if value in PRESETS:
        return PRESETS[value]()
    path = Path(value)
    if value.endswith(".toml") or path.is_file():
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise SpecError(f"mock spec file {value!r} does not exist") from None
        except (OSError, UnicodeDecodeError) as e:
            raise SpecError(f"cannot read mock spec {value!r}: {e}") from None
        except tomllib.TOMLDecodeError as e:
            raise SpecError(f"malformed TOML in mock spec {value!r}: {e}") from None
        return _from_toml(path, data)
    raise SpecError(f"unknown mock preset {value!r}: choose one of {', '.join(PRESETS)} or give a .toml file")
