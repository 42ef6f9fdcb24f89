"""Which generation the devices are and which EC2 instance the node is.

Generation, most decisive source first (/work/notes/neuron-facts.md, sec. 8):
sysfs `device_name` (readable by anyone), the PCI device id, a device-level
`arch_type` of NDv2, the instance type (neuron-ls `instance_type`, DMI),
then the shape neuron-ls shows (a logical core config or 96 GiB: Trainium2;
one or two links: the Inferentia2 ring or line; four links: the Trainium
torus). A lone 2-core, 32 GiB device with nothing decisive is trn1.2xlarge
or an inf2.(8)xlarge: unknown, said so, never guessed.

Instance type: neuron-ls `instance_type` when printed, then DMI
`product_name`, then the shape where only one instance has it; else
"unknown" with the reason. sysfs `instance_type` ("Trn1") is a family and is
never used as an instance type.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ray_accel_neuron import arch, limits
from ray_accel_neuron.arch import Generation
from ray_accel_neuron.neuron_ls import LsDevice
from ray_accel_neuron.sysfs import PciFunction, Reading

UNKNOWN = "unknown"
_INSTANCE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$")


@dataclass(frozen=True)
class Decision:
    generation: Generation | None
    source: str  # where it came from, or why it is unknown
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class InstanceType:
    value: str  # an EC2 instance type, or "unknown"
    source: str  # where it came from, or why it is unknown
    warnings: tuple[str, ...] = ()


def _agree(found: Mapping[int, Generation], what: str) -> Generation | None:
    kinds = {g.accelerator_type for g in found.values()}
    if len(kinds) > 1:
        listed = ", ".join(f"neuron:{i} {g.accelerator_type}" for i, g in sorted(found.items()))
        raise limits.BadData(f"{what} name different generations on one node: {listed}")
    return next(iter(found.values()), None)


def _device_names(names: Mapping[int, Reading]) -> dict[int, Generation]:
    out = {}
    for i, r in names.items():
        if r.text is None or not r.text.strip():
            continue
        g = arch.from_device_name(r.text)
        if g is None:
            raise limits.BadData(f"{r.path} is {r.text.strip()!r}, not a Neuron device name this backend knows")
        out[i] = g
    return out


def _pci_ids(bdfs: Mapping[int, str], pci: Mapping[str, PciFunction]) -> dict[int, Generation]:
    out = {}
    for i, bdf in bdfs.items():
        fn = pci.get(bdf)
        if fn is None or fn.device_id is None:
            continue
        g = arch.from_pci_device_id(fn.device_id)
        if g is None:
            raise limits.BadData(f"PCI function {bdf} of neuron:{i} has device id {fn.device_id:#06x}, not a Neuron id")
        out[i] = g
    return out


def _shape(ls: Sequence[LsDevice]) -> tuple[Generation | None, str]:
    if not ls:
        return None, "no neuron-ls listing"
    if any(d.lnc is not None for d in ls):
        return arch.TRAINIUM2, "neuron-ls prints logical_neuroncore_config (Trainium2 only)"
    if any((d.memory_bytes or 0) >= arch.TRAINIUM2.memory_bytes for d in ls):
        return arch.TRAINIUM2, "neuron-ls memory_size of 96 GiB"
    degrees = {len(d.connected or ()) for d in ls}
    if degrees & {1, 2}:
        return arch.INFERENTIA2, "neuron-ls links form a ring or a line (Inferentia2)"
    if 4 in degrees:
        return arch.TRAINIUM, "neuron-ls links form a 4x4 torus with 32 GiB devices (Trainium)"
    return None, (
        f"{len(ls)} device(s) with {ls[0].nc_count} cores, no links and no decisive source "
        "(sysfs device_name, PCI device id, instance type): Trainium and Inferentia2 look the same here"
    )


def generation(
    device_names: Mapping[int, Reading],
    arch_types: Mapping[int, Reading],
    bdfs: Mapping[int, str],
    pci: Mapping[str, PciFunction],
    all_pci_ids: Iterable[int],
    ls: Sequence[LsDevice],
    instance_hints: Sequence[tuple[str, str]],
) -> Decision:
    """`instance_hints`: (instance type, where it came from), most trusted first."""
    by_name = _agree(_device_names(device_names), "sysfs device_name files")
    by_pci = _agree(_pci_ids(bdfs, pci), "PCI device ids")
    shared = {g.accelerator_type: g for i in set(all_pci_ids) if (g := arch.from_pci_device_id(i)) is not None}
    by_all_pci = next(iter(shared.values())) if len(shared) == 1 else None
    if by_name and by_pci and by_name is not by_pci:
        raise limits.BadData(
            f"sysfs device_name says {by_name.accelerator_type}, PCI device id says {by_pci.accelerator_type}"
        )
    decisive = [
        (by_name, "sysfs info/architecture/device_name"),
        (by_pci, "PCI device id"),
        (by_all_pci, "PCI device id of every Neuron function"),
        (
            arch.TRAINIUM if any(r.text and arch.from_arch_type(r.text) for r in arch_types.values()) else None,
            "sysfs arch_type NDv2",
        ),
    ]
    for g, source in decisive:
        if g is not None:
            return Decision(g, source)
    for value, where in instance_hints:  # one that is no Neuron instance is reported by `instance_type`
        g = arch.from_instance_type(value)
        if g is not None:
            return Decision(g, f"instance type {value} ({where})")
    g, why = _shape(ls)
    if g is not None:
        return Decision(g, f"shape: {why}")
    return Decision(None, why, (f"device generation unknown: {why}",))


def clean_instance_type(text: str | None) -> str | None:
    value = (text or "").strip().lower()
    return value if _INSTANCE.match(value) else None


def instance_type(
    gen: Generation | None, host_devices: int | None, hints: Sequence[tuple[str, str]], dmi_reason: str | None
) -> InstanceType:
    """`hints`: (instance type, source) in order of trust (neuron-ls, then DMI)."""
    reasons = []
    for value, where in hints:
        g = arch.from_instance_type(value)
        if g is None:
            reasons.append(f"{where} {value!r} is not a Neuron instance type")
        elif gen is not None and g is not gen:
            reasons.append(f"{where} {value!r} does not hold {gen.accelerator_type} devices")
        else:
            return InstanceType(value, where)
    if not any(where.startswith("neuron-ls") for _, where in hints):
        reasons.append("neuron-ls printed no instance_type")
    if dmi_reason:
        reasons.append(f"DMI product_name: {dmi_reason}")
    if gen is None:
        reasons.append("the device generation is unknown")
    elif host_devices is None:
        reasons.append("the host's device count is unknown (a container's view)")
    else:
        unique = arch.UNIQUE_SHAPES.get((gen, host_devices))
        if unique is not None:
            rejected = tuple(f"{r}: ignored" for r in reasons if "instance type" in r or "does not hold" in r)
            return InstanceType(unique, f"shape: {host_devices} {gen.accelerator_type} device(s)", rejected)
        options = arch.AMBIGUOUS_SHAPES.get((gen, host_devices))
        if options:
            reasons.append(f"{host_devices} {gen.accelerator_type} device(s) fit {' or '.join(options)}")
        else:
            reasons.append(f"no instance has {host_devices} {gen.accelerator_type} device(s)")
    why = "; ".join(reasons)
    return InstanceType(UNKNOWN, why, (f"instance type unknown: {why}",))
