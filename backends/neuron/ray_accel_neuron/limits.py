"""Documented maxima for what the driver and tools may report.

From the Neuron driver's `neuron_device.h` (aws-neuron/aws-neuron-driver @
fca19f7df31b44cbbffaf121230a66df6f59d118, aws-neuronx-dkms 2.24.7.0):
`MAX_NEURON_DEVICE_COUNT 64` devices per host and `MAX_NC_PER_DEVICE 8`
physical NeuronCores per device. Logical cores per device are at most the
physical count (a logical core groups 1 or 2 physical ones: the Neuron
documentation's logical-neuroncore-config page). A value past these is
refused with its name, instead of being turned into a list of that length.
"""

from __future__ import annotations

MAX_DEVICES = 64
MAX_PHYSICAL_CORES = 8
MAX_LOGICAL_CORES = MAX_PHYSICAL_CORES
LNC_VALUES = (1, 2)
MAX_CORE_ID = MAX_DEVICES * MAX_LOGICAL_CORES - 1


class BadData(ValueError):
    """What the driver or a tool reported cannot be used (out of range, or
    contradicting another source). Data from the machine, not user input:
    the backend goes inactive with this message as its reason."""


class OutOfRange(BadData):
    """A count or index past the documented maxima; the message names it."""


def check(value: int, what: str, lo: int, hi: int, limit_name: str) -> int:
    if not lo <= value <= hi:
        raise OutOfRange(f"{what} {value} is outside {lo}..{hi} ({limit_name})")
    return value


def device_index(value: int, what: str) -> int:
    return check(value, what, 0, MAX_DEVICES - 1, f"the driver's MAX_NEURON_DEVICE_COUNT is {MAX_DEVICES}")


def physical_cores(value: int, what: str) -> int:
    return check(value, what, 1, MAX_PHYSICAL_CORES, f"the driver's MAX_NC_PER_DEVICE is {MAX_PHYSICAL_CORES}")


def logical_cores(value: int, what: str) -> int:
    return check(value, what, 1, MAX_LOGICAL_CORES, f"at most {MAX_LOGICAL_CORES} NeuronCores per device")


def core_id(value: int, what: str) -> int:
    return check(value, what, 0, MAX_CORE_ID, f"{MAX_DEVICES} devices x {MAX_LOGICAL_CORES} cores")
