"""Which generation the devices are and which EC2 instance the host is.

Generation, most decisive source first: sysfs `device_name` (readable by
anyone), the PCI device id, a device-level `arch_type` that names one
generation (NDv2: Trainium, NDv4: Trainium3), the instance type (neuron-ls
`instance_type`, DMI), then the shape neuron-ls shows (a logical core config
with 96 or 144 GiB: Trainium2 or Trainium3; 96 GiB alone: Trainium2; one or
two links: the Inferentia2 ring or line; four links: the Trainium torus). A
lone 2-core, 32 GiB device with nothing decisive is trn1.2xlarge or an
inf2.(8)xlarge: unknown, said so, never guessed.

Unknown is not wrong: a `device_name`, PCI device id or `arch_type` this
backend's table does not hold is a warning naming it, never a reason to stop.
A device name not in the table becomes the generation's name
(`arch.reported`), with every fact the table would give left to the data.
Only sources that contradict each other (two known generations on one host,
a known name and a known PCI id or arch string of another generation) are
`BadData`.

Instance type: neuron-ls `instance_type` when printed, then DMI
`product_name`, then the shape where only one instance has it; else
"unknown" with the reason. sysfs `instance_type` ("Trn1") is a family and is
never used as an instance type.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ray_accel.core.visibility import format_visible_ids
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
        raise limits.BadData(f"{what} name different generations on one host: {listed}")
    return next(iter(found.values()), None)


def _device_names(names: Mapping[int, Reading], warnings: list[str]) -> dict[int, Generation]:
    """Known names give their generation; a name the table does not hold
    gives a generation of that name (`arch.reported`) and a warning."""
    out = {}
    unknown: dict[str, list[int]] = {}
    for i, r in names.items():
        if r.text is None or not r.text.strip():
            continue
        g = arch.from_device_name(r.text)
        if g is None:
            g = arch.reported(r.text)
            if g is None:
                raise limits.BadData(f"{r.path} is {r.text.strip()!r}: no letter or digit to name a device by")
            unknown.setdefault(r.text.strip(), []).append(i)
        out[i] = g
    for name, indexes in unknown.items():
        warnings.append(
            f"sysfs device_name {name!r} of {_ids(indexes)} is not a Neuron device this backend knows: "
            "used as reported, with the cores, links and memory the data shows"
        )
    return out


def _ids(indexes: Iterable[int]) -> str:
    return "neuron:" + format_visible_ids(sorted(indexes), "ranges")


def _pci_ids(bdfs: Mapping[int, str], pci: Mapping[str, PciFunction], warnings: list[str]) -> dict[int, Generation]:
    out = {}
    for i, bdf in bdfs.items():
        fn = pci.get(bdf)
        if fn is None or fn.device_id is None:
            continue
        g = arch.from_pci_device_id(fn.device_id)
        if g is None:
            warnings.append(
                f"PCI function {bdf} of neuron:{i} has device id {fn.device_id:#06x}, "
                "not a Neuron device id this backend knows"
            )
            continue
        out[i] = g
    return out


def _arch_types(
    arch_types: Mapping[int, Reading], by_name: Generation | None, warnings: list[str]
) -> Generation | None:
    """The generation the device-level arch_type strings name (NDv2, NDv4),
    checked against the known device name; unknown strings are warnings."""
    named: dict[int, Generation] = {}
    unknown: dict[str, list[int]] = {}
    for i, r in arch_types.items():
        if r.text is None or not r.text.strip():
            continue
        text = r.text.strip()
        holders = arch.with_arch_type(text)
        if not holders:
            unknown.setdefault(text, []).append(i)
            continue
        if by_name is not None and by_name.known and by_name not in holders:
            raise limits.BadData(
                f"{r.path} is {text!r}, which no {by_name.accelerator_type} has "
                f"(sysfs device_name says {by_name.accelerator_type})"
            )
        if len(holders) == 1:
            named[i] = holders[0]
    for text, indexes in unknown.items():
        warnings.append(f"sysfs arch_type {text!r} of {_ids(indexes)} is not one this backend knows")
    return _agree(named, "sysfs arch_type files")


def _shape(ls: Sequence[LsDevice]) -> tuple[Generation | None, str]:
    if not ls:
        return None, "no neuron-ls listing"
    sizes = {d.memory_bytes for d in ls if d.memory_bytes}
    by_memory: dict[int, Generation] = {96 * arch.GIB: arch.TRAINIUM2, 144 * arch.GIB: arch.TRAINIUM3}
    one = next(iter(sizes)) if len(sizes) == 1 else None
    if any(d.lnc is not None for d in ls):
        # logical_neuroncore_config: Trainium2 and Trainium3 only (neuron-ls.rst, logical-neuroncore-config.rst).
        if one is not None and one in by_memory:
            g = by_memory[one]
            return g, f"neuron-ls prints logical_neuroncore_config and memory_size of {one // arch.GIB} GiB"
        return None, (
            f"neuron-ls prints logical_neuroncore_config (Trainium2 or Trainium3) and memory_size "
            f"{sorted(sizes) or 'none'}, which tells neither"
        )
    if one is not None and one in by_memory:
        g = by_memory[one]
        return g, f"neuron-ls memory_size of {one // arch.GIB} GiB ({g.accelerator_type})"
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
    warnings: list[str] = []
    named = _agree(_device_names(device_names, warnings), "sysfs device_name files")
    by_name = named if named is not None and named.known else None
    by_pci = _agree(_pci_ids(bdfs, pci, warnings), "PCI device ids")
    ids = set(all_pci_ids)
    shared = {g.accelerator_type: g for i in ids if (g := arch.from_pci_device_id(i)) is not None}
    strange = sorted(i for i in ids if arch.from_pci_device_id(i) is None)
    if strange and not by_pci:
        shown = ", ".join(f"{i:#06x}" for i in strange)
        warnings.append(f"Neuron PCI functions with device ids {shown}: not ids this backend knows")
    by_all_pci = next(iter(shared.values())) if len(shared) == 1 else None
    for other in (by_pci, by_all_pci):
        if by_name and other and by_name is not other:
            raise limits.BadData(
                f"sysfs device_name says {by_name.accelerator_type}, PCI device id says {other.accelerator_type}"
            )
    by_arch = _arch_types(arch_types, named, warnings)
    if by_name and by_arch and by_name is not by_arch:
        raise limits.BadData(
            f"sysfs device_name says {by_name.accelerator_type}, sysfs arch_type says {by_arch.accelerator_type}"
        )
    decisive = [
        (by_name, "sysfs info/architecture/device_name"),
        (by_pci, "PCI device id"),
        (by_all_pci, "PCI device id of every Neuron function"),
        (by_arch, f"sysfs arch_type {', '.join(by_arch.arch_types) if by_arch else ''}"),
    ]
    for g, source in decisive:
        if g is not None:
            if named is not None and not named.known:
                warnings.append(
                    f"sysfs device_name {named.device_name!r} is not known, but the {source} says "
                    f"{g.accelerator_type}: {g.accelerator_type} used"
                )
            return Decision(g, source, tuple(warnings))
    if named is not None:
        return Decision(named, "sysfs info/architecture/device_name (not in this backend's table)", tuple(warnings))
    for value, where in instance_hints:  # one that is no Neuron instance is reported by `instance_type`
        g = arch.from_instance_type(value)
        if g is not None:
            return Decision(g, f"instance type {value} ({where})", tuple(warnings))
    g, why = _shape(ls)
    if g is not None:
        return Decision(g, f"shape: {why}", tuple(warnings))
    return Decision(None, why, (*warnings, f"device generation unknown: {why}"))


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
        if g is None and (where.startswith("neuron-ls") or (gen is not None and not gen.known)):
            # The Neuron tool's own word, or the host of a device this backend
            # does not know either: kept as given.
            return InstanceType(
                value, where, (f"instance type {value!r} ({where}) is not one this backend knows: used as given",)
            )
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
    if gen is None or not gen.known:
        reasons.append("the device generation is unknown" if gen is None else f"{gen.accelerator_type} is not known")
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
