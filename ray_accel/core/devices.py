"""The device model: what a host has, as frozen values.

A `Device` is one physical accelerator (a GPU, a Neuron device). Its
`core_ids` are the schedulable units the visibility variable names: global
NeuronCore indexes for Neuron, the device's own index for a GPU. Its
`accelerator_type` is what Ray's `accelerator_type:<T>` resource would say
for it alone (`A100` for an 'NVIDIA A100-SXM4-40GB'); None where the backend
types only the host. Everything here is pure; discovery (sysfs, NVML, a spec
file) lives in the backends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ray_accel.core.errors import RayAccelError

# A family is a backend's own name for its kind of device; what ray-accel
# must know of one (may it be shared, how to split it) the backend declares
# (`ray_accel.plugins.traits`).
DeviceId = str


class DeviceError(RayAccelError):
    """An inventory that contradicts itself (duplicate ids, unknown peers).

    Not an `InputError`: when a driver or tool reports it, it is data from the
    machine, and discovery lists that backend inactive with this reason. A spec
    the user wrote (the mock's) turns it into its own input error.
    """


@dataclass(frozen=True, kw_only=True)
class Device:
    id: DeviceId
    family: str
    index: int
    model: str
    memory_bytes: int
    core_ids: tuple[int, ...]
    numa_node: int = -1
    pci_bus_id: str | None = None
    peers: tuple[DeviceId, ...] = ()
    # Links to devices that cannot be used here (a container given some of the
    # host's devices): shown, never planned over, not checked for symmetry.
    external_peers: tuple[DeviceId, ...] = ()
    serial: str | None = None
    architecture: str | None = None
    attributes: Mapping[str, str] = field(default_factory=dict, hash=False)
    accelerator_type: str | None = None


@dataclass(frozen=True, kw_only=True)
class HostInfo:
    """What a plugin knows about the host as a whole."""

    plugin: str
    family: str
    accelerator_type: str | None
    resource_name: str
    visible_ids_env: str
    device_count: int
    core_count: int
    instance_type: str | None = None
    driver_version: str | None = None
    runtime_version: str | None = None
    attributes: Mapping[str, str] = field(default_factory=dict, hash=False)
    # Facts the backend could not establish, each with its reason.
    warnings: tuple[str, ...] = ()


def all_core_ids(devices: Iterable[Device]) -> list[int]:
    """Sorted union of the schedulable ids of `devices`."""
    return sorted(c for d in devices for c in d.core_ids)


def validate_inventory(devices: Iterable[Device]) -> tuple[Device, ...]:
    """Check that an inventory is self-consistent and return it sorted by index.

    Rejects duplicate ids, indexes or core ids, devices without cores, peers
    that name unknown devices or the device itself, one-sided links, and
    external peers that are on the host after all.
    """
    items = sorted(devices, key=lambda d: d.index)
    by_id: dict[DeviceId, Device] = {}
    indexes: set[int] = set()
    cores: dict[int, DeviceId] = {}
    for d in items:
        if d.id in by_id:
            raise DeviceError(f"duplicate device id {d.id!r}")
        if d.index in indexes:
            raise DeviceError(f"duplicate device index {d.index} (device {d.id!r})")
        if not d.core_ids:
            raise DeviceError(f"device {d.id!r} has no cores")
        if d.memory_bytes < 0:
            raise DeviceError(f"device {d.id!r} has negative memory {d.memory_bytes}")
        for c in d.core_ids:
            if c < 0:
                raise DeviceError(f"device {d.id!r} has negative core id {c}")
            if c in cores:
                raise DeviceError(f"core {c} belongs to both {cores[c]!r} and {d.id!r}")
            cores[c] = d.id
        by_id[d.id] = d
        indexes.add(d.index)
    for d in items:
        for p in d.peers:
            if p == d.id:
                raise DeviceError(f"device {d.id!r} lists itself as a peer")
            if p not in by_id:
                raise DeviceError(f"device {d.id!r} names unknown peer {p!r}")
            if d.id not in by_id[p].peers:
                raise DeviceError(f"link {d.id!r} -> {p!r} is one-sided: {p!r} does not list {d.id!r}")
        for p in d.external_peers:
            if p == d.id or p in by_id:
                raise DeviceError(f"device {d.id!r} lists {p!r} as external, but it is on this host")
    return tuple(items)
