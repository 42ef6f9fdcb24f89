"""Planning in tests with the traits each family's backend declares, as
`ray-accel plan` and `start` get them from the backend (`DevicePlugin.traits`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ray_accel_cuda import runtime as cuda
from ray_accel_neuron import runtime as neuron

from ray_accel.bridge.managers import BridgeSpec
from ray_accel.cluster.auth import Auth
from ray_accel.cluster.host import (
    MIN_WORKER_PORTS,
    SEARCH_FROM,
    HostResources,
    divide,
    port_blocks,
    worker_port_count,
)
from ray_accel.cluster.record import HostRecord, PartitionEntry
from ray_accel.core.devices import Device
from ray_accel.core.numa import NumaTopology
from ray_accel.core.validate import HEAD
from ray_accel.partition.plan import MaskView, Partition, Plan, plan_partitions
from ray_accel.plugins.traits import DeviceTraits

BY_FAMILY = {neuron.FAMILY: neuron.TRAITS, cuda.FAMILY: cuda.TRAITS}


def traits_for(devices: Sequence[Device]) -> DeviceTraits:
    """The traits of the backend whose family `devices` are (the defaults
    where they are of no one known family: the planner refuses a mix)."""
    families = {d.family for d in devices}
    return BY_FAMILY[families.pop()] if len(families) == 1 and families <= BY_FAMILY.keys() else DeviceTraits()


def plan_for(devices: Sequence[Device], *args: Any, **kwargs: Any) -> Plan:
    """`plan_partitions` with the traits of `devices`' backend."""
    return plan_partitions(devices, *args, traits=traits_for(devices), **kwargs)


def started_record(
    devices: Sequence[Device],
    manual: str,
    *,
    cpus: int = 8,
    object_store: int = 4 << 30,
    port_base: int | None = None,
    inherited: MaskView | None = None,
) -> HostRecord:
    """A record of a head and the partitions of `manual` as `start` would
    write it on a host of `cpus` CPUs and `object_store` bytes of object
    store: each partition's share by its units, its port block sized by its
    share's CPUs, the blocks one after the other from `port_base` (the
    default range's first otherwise), the head's first."""
    parts = plan_for(devices, "manual", manual=manual).partitions
    if inherited is not None:
        shown = set(inherited.visible_ids)
        parts = tuple(
            Partition(p.name, p.device_ids, tuple(c for c in p.core_ids if c in shown), p.accelerator_type, p.models)
            for p in parts
        )
    host = HostResources(cpus=cpus, memory=64 << 30, object_store_memory=object_store)
    names, units = [p.name for p in parts], [len(p.core_ids) for p in parts]
    shares = divide(names, units, [() for _ in parts], host, NumaTopology("/none"), ()).shares
    workers = [MIN_WORKER_PORTS, *(worker_port_count(s.cpus, n) for s, n in zip(shares, units, strict=True))]
    blocks = port_blocks(port_base if port_base is not None else SEARCH_FROM, workers)
    spec = BridgeSpec(
        resource_name="neuron_cores",
        visible_ids_env="NEURON_RT_VISIBLE_CORES",
        family=devices[0].family,
        accelerator_type=None,
        unit_ids=tuple(c for d in devices for c in d.core_ids),
        backend="mock",
        traits=traits_for(devices),
    )
    entries = tuple(
        PartitionEntry(
            name=p.name,
            device_ids=p.device_ids,
            core_ids=p.core_ids,
            head=False,
            ports=blocks[i + 1],
            processes=(),
            node_id="ab" * 28,
            share=share,
        )
        for i, (p, share) in enumerate(zip(parts, shares, strict=True))
    )
    head = PartitionEntry(name=HEAD, device_ids=(), core_ids=(), head=True, ports=blocks[0], processes=())
    return HostRecord(
        host="host", host_ip="10.0.0.1", created=1.0, head=True, mode="manual", spec=spec, ray_args=(),
        gcs_address="10.0.0.1:6379", gcs_port=6379, auth=Auth("disabled", None, "test"), partitions=entries,
        head_raylet=head, port_base=port_base, inherited_mask=inherited,
    )  # fmt: skip
