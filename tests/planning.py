"""Planning in tests with the traits each family's backend declares, as
`ray-accel plan` and `start` get them from the backend (`DevicePlugin.traits`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ray_accel_cuda import runtime as cuda
from ray_accel_neuron import runtime as neuron

from ray_accel.core.devices import Device
from ray_accel.partition.plan import Plan, plan_partitions
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
