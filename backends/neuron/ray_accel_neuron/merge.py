"""One inventory from every source, each fact with where it came from.

Pure: the plugin reads the sources (`sysfs`, `neuron_ls`, PCI, DMI, /dev)
and hands them here. The rules:

- Visible devices are those this process can open: the usable /dev/neuronN
  nodes when /dev has any (sysfs is not namespaced, so a container sees
  every host device there), else what neuron-ls lists (it opens them).
- Cores: `cores.number`, one rule for sysfs's physical counts and
  neuron-ls's logical ones; both read must agree.
- Links: by the generation's fabric. Trainium3 is all to all (the Neuron
  docs' trn3-arch.rst): every device of the host is a peer, and the driver's
  `connected_devices` is not used (2.30.2.0 prints the Trn2 torus table
  there under "TODO PDS update", `fw_io_topology_v3`). Otherwise sysfs
  `connected_devices` (root-only), else neuron-ls `connected_to`. A link to
  a device not visible here is an external peer: shown, never planned over.
- NUMA: the PCI function's `numa_node` by the BDF neuron-ls gives, else
  neuron-ls's own `numa_node`, else the node every Neuron PCI function is
  on; otherwise unknown, with a warning.
- A fact no source gives is a warning naming the reason, never a default.
  A device, name or field this backend does not know keeps working with a
  warning naming it. What the machine reports that contradicts itself
  raises `BadData`; the backend then goes inactive with that reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ray_accel.core.devices import Device
from ray_accel.core.visibility import format_visible_ids
from ray_accel_neuron import arch, cores, identity, limits, sysfs
from ray_accel_neuron.arch import Generation
from ray_accel_neuron.neuron_ls import FORMAT_NEW, LsDevice
from ray_accel_neuron.runtime import FAMILY
from ray_accel_neuron.sysfs import DevNode, PciFunction, Reading, SysfsDevice


@dataclass(frozen=True, kw_only=True)
class Sources:
    neuron_root: str
    dev_root: str
    sysfs: tuple[SysfsDevice, ...] = ()
    sysfs_error: str | None = None  # why the Neuron class directory could not be listed
    sysfs_layout: str | None = None  # why the tree is not a layout this backend reads (`sysfs.layout_problem`)
    dev: tuple[DevNode, ...] = ()
    pci: Mapping[str, PciFunction] = field(default_factory=dict)  # by BDF
    neuron_pci: tuple[str, ...] = ()  # BDFs bound to the Neuron driver
    ls: tuple[LsDevice, ...] | None = None
    ls_error: str | None = None  # why there is no neuron-ls listing
    ls_path: str | None = None
    ls_format: str | None = None  # which output format neuron-ls printed
    ls_unread: tuple[str, ...] = ()  # its top-level fields not read (new format)
    dmi: Reading | None = None
    env_lnc: int | None = None
    file_lnc: int | None = None


@dataclass(frozen=True, kw_only=True)
class Inventory:
    devices: tuple[Device, ...]
    generation: Generation | None
    generation_source: str
    instance: identity.InstanceType
    lnc: cores.Lnc
    warnings: tuple[str, ...]
    sources: tuple[str, ...]  # the sources that contributed


def ids_text(indexes: Sequence[int]) -> str:
    return "neuron:" + format_visible_ids(sorted(indexes), "ranges")


def _visible(src: Sources, in_sysfs: set[int], in_ls: set[int] | None, warnings: list[str]) -> dict[int, str]:
    """Index -> how we know this process can use it."""
    known = in_sysfs | (in_ls or set())
    if src.dev:
        usable = {n.index: n for n in src.dev if n.usable}
        for n in src.dev:
            if not n.usable:
                warnings.append(f"{n.path}: {n.reason}: neuron:{n.index} not used")
        stray = sorted(set(usable) - known)
        if stray:
            warnings.append(f"{ids_text(stray)} have a /dev node but no sysfs entry or neuron-ls listing: not used")
        if in_ls is not None:
            missing = sorted((set(usable) & in_sysfs) - in_ls)
            if missing:
                warnings.append(f"neuron-ls does not list {ids_text(missing)}, which sysfs and /dev show")
            unopenable = sorted(in_ls - set(usable))
            if unopenable:
                warnings.append(f"neuron-ls lists {ids_text(unopenable)}, which have no usable node in {src.dev_root}")
        visible = {i: usable[i].path for i in sorted(set(usable) & known)}
        if not visible:
            # A listing that could not be read says why none matched (its bad count, say).
            unread = f"neuron-ls: {src.ls_error}" if in_ls is None and src.ls_error else "no match"
            reasons = "; ".join(f"{n.path}: {n.reason}" for n in src.dev if not n.usable) or unread
            raise limits.BadData(f"no Neuron device in {src.dev_root} can be used here ({reasons})")
    elif in_ls is not None:
        visible = dict.fromkeys(sorted(in_ls), "listed by neuron-ls (which opens the devices)")
    elif in_sysfs:
        raise limits.BadData(
            f"sysfs shows {len(in_sysfs)} Neuron device(s) but {src.dev_root} has no neuron* node: "
            "none can be opened here (a container started without --device=/dev/neuronN?)"
        )
    else:
        raise limits.BadData(
            f"no Neuron devices: {src.sysfs_error or src.neuron_root + ' lists none'}; "
            f"neuron-ls: {src.ls_error or 'lists none'}"
        )
    hidden = sorted(in_sysfs - set(visible))
    if hidden and src.dev:
        warnings.append(
            f"{ids_text(hidden)} are in sysfs but cannot be opened here (no usable node in {src.dev_root}): "
            "not used; their links count as external"
        )
    return visible


def _physical(sd: SysfsDevice, denied: list[tuple[int, str]]) -> tuple[int | None, str]:
    r = sd.core_count
    if r.refused:
        raise limits.BadData(f"{r.error}")
    from_dirs = sd.core_dirs or None
    if r.text is not None:
        n = limits.physical_cores(sysfs.parse_count(r.text, r.path), r.path)
        if from_dirs is not None and from_dirs != n:
            raise limits.BadData(f"{r.path} says {n} cores but {sd.path} has {from_dirs} neuron_coreN directories")
        return n, "sysfs core_count"
    if r.denied:
        denied.append((sd.index, "core_count"))
    if from_dirs is not None:
        return limits.physical_cores(from_dirs, f"{sd.path} neuron_coreN directories"), "sysfs neuron_coreN directories"
    return None, f"{r.path}: {r.error}"


ALL_TO_ALL_SOURCE = (
    "architecture: {kind} devices are linked all to all (Neuron docs, trn3-arch.rst); "
    "the driver's connected_devices is a placeholder for them and is not used"
)


def _links(
    index: int,
    sd: SysfsDevice | None,
    ld: LsDevice | None,
    denied: list[tuple[int, str]],
    warnings: list[str],
    gen: Generation | None = None,
    host: tuple[int, ...] = (),
) -> tuple[tuple[int, ...] | None, str]:
    if gen is not None and gen.fabric == arch.ALL_TO_ALL:
        return tuple(i for i in host if i != index), ALL_TO_ALL_SOURCE.format(kind=gen.accelerator_type)
    from_sysfs = None
    why = "no source"
    if sd is not None:
        r = sd.connected
        if r.refused:
            raise limits.BadData(f"{r.error}")
        if r.text is not None:
            from_sysfs = sysfs.parse_connected(r.text, r.path)
        else:
            why = f"{r.path}: {r.error}"
            if r.denied:
                denied.append((index, "connected_devices"))
    from_ls = None if ld is None else (ld.connected or ())
    if from_sysfs is not None and from_ls is not None and set(from_sysfs) != set(from_ls):
        warnings.append(
            f"neuron:{index}: sysfs connected_devices {list(from_sysfs)} and neuron-ls connected_to "
            f"{list(from_ls)} differ: sysfs kept"
        )
    if from_sysfs is not None:
        return from_sysfs, "sysfs connected_devices"
    if from_ls is not None:
        return from_ls, "neuron-ls connected_to"
    return None, why


def _numa(index: int, bdf: str | None, ld: LsDevice | None, src: Sources) -> tuple[int | None, str, str | None]:
    """(NUMA node, source, cpu list)."""
    fn = src.pci.get(bdf) if bdf else None
    if fn is not None and fn.numa_node is not None:
        return fn.numa_node, f"PCI {bdf}/numa_node", fn.local_cpulist or (ld.cpu_affinity if ld else None)
    if ld is not None and ld.numa_node is not None:
        return ld.numa_node, "neuron-ls numa_node", ld.cpu_affinity
    nodes = {src.pci[b].numa_node for b in src.neuron_pci if b in src.pci}
    if src.neuron_pci and len(nodes) == 1 and None not in nodes:
        node = nodes.pop()
        cpus = {src.pci[b].local_cpulist for b in src.neuron_pci if b in src.pci}
        return (
            node,
            f"PCI: all {len(src.neuron_pci)} Neuron functions are on NUMA node {node}",
            (cpus.pop() if len(cpus) == 1 else None),
        )
    if src.neuron_pci:
        why = (
            f"the {len(src.neuron_pci)} Neuron PCI functions are on NUMA nodes {sorted(nodes, key=str)} "
            f"and nothing maps neuron:{index} to its BDF (neuron-ls gives it)"
        )
    else:
        why = "no BDF from neuron-ls and no Neuron PCI functions in sysfs"
    return None, why, None


def merge(src: Sources) -> Inventory:
    warnings: list[str] = []
    denied: list[tuple[int, str]] = []  # root-only files this user could not read
    by_sysfs: dict[int, SysfsDevice] = {}
    for entry in src.sysfs:
        limits.device_index(entry.index, entry.path)
        by_sysfs[entry.index] = entry
    by_ls = None if src.ls is None else {d.index: d for d in src.ls}
    visible = _visible(src, set(by_sysfs), None if by_ls is None else set(by_ls), warnings)
    ls = by_ls or {}

    hints = [
        (it, "neuron-ls instance_type") for it in sorted({d.instance_type for d in ls.values() if d.instance_type})
    ]
    if len(hints) > 1:
        warnings.append(f"neuron-ls prints several instance types ({', '.join(h for h, _ in hints)}): ignored")
        hints = []
    dmi_text = identity.clean_instance_type(src.dmi.text if src.dmi else None)
    dmi_reason = None
    if dmi_text:
        hints.append((dmi_text, "DMI product_name"))
    elif src.dmi is not None:
        dmi_reason = src.dmi.error or f"{src.dmi.text!r} is not an instance type"
    decision = identity.generation(
        {i: by_sysfs[i].device_name for i in visible if i in by_sysfs},
        {i: by_sysfs[i].arch_type for i in visible if i in by_sysfs},
        _bdfs(visible, ls),
        src.pci,
        [fn.device_id for b in src.neuron_pci if (fn := src.pci.get(b)) and fn.device_id is not None],
        [ls[i] for i in visible if i in ls],
        hints,
    )
    gen = decision.generation
    warnings += decision.warnings

    tool_lncs = {d.lnc for d in ls.values() if d.lnc is not None}
    if len(tool_lncs) > 1:
        raise limits.BadData(f"neuron-ls prints logical_neuroncore_config {sorted(tool_lncs)} on one host")
    lnc, lnc_warnings = cores.worker_lnc(gen, src.env_lnc, next(iter(tool_lncs), None), src.file_lnc)
    warnings += lnc_warnings
    if src.sysfs_layout:
        if src.ls is None:
            raise limits.BadData(
                f"sysfs layout not recognised: {src.sysfs_layout}; neuron-ls, the fallback, is unavailable "
                f"({src.ls_error})"
            )
        warnings.append(f"sysfs layout not recognised: {src.sysfs_layout}; facts from neuron-ls ({src.ls_format})")
    if src.ls is not None and src.ls_format == FORMAT_NEW:
        unread = f"; top-level fields not read: {', '.join(src.ls_unread)}" if src.ls_unread else ""
        warnings.append(f"neuron-ls printed {FORMAT_NEW}, read by its shape{unread}")
    host = tuple(sorted(set(by_sysfs) | set(ls)))

    devices = []
    no_links: list[int] = []
    no_numa: dict[int, str] = {}
    no_memory: list[int] = []
    per_device: dict[int, int] = {}
    from_physical: list[int] = []
    for i, how_visible in visible.items():
        sd, ld = by_sysfs.get(i), ls.get(i)
        physical, physical_source = (None, "no sysfs entry") if sd is None else _physical(sd, denied)
        numbering = cores.number(
            i,
            lnc,
            physical=physical,
            physical_source=physical_source,
            nc_count=None if ld is None else ld.nc_count,
            tool_lnc=None if ld is None else ld.lnc,
            given_ids=None if ld is None else ld.core_ids,
        )
        warnings += numbering.warnings
        per_device[i] = len(numbering.ids)
        if ld is None:
            from_physical.append(i)
        links, links_source = _links(i, sd, ld, denied, warnings, gen, host)
        if links is None:
            no_links.append(i)
        if links is not None and i in links:
            raise limits.BadData(f"neuron:{i} lists itself as linked ({links_source})")
        bdf = ld.bdf if ld else None
        numa, numa_source, cpus = _numa(i, bdf, ld, src)
        if numa is None:
            no_numa[i] = numa_source
        if ld is not None and ld.memory_bytes:
            memory, memory_source = ld.memory_bytes, "neuron-ls memory_size"
        elif gen is not None and gen.memory_bytes:
            memory, memory_source = gen.memory_bytes, f"architecture table ({gen.accelerator_type})"
        else:
            memory, memory_source = 0, "unknown"
            no_memory.append(i)
        arch_type = sd.arch_type.text.strip() if sd and sd.arch_type.text and sd.arch_type.text.strip() else None
        attributes = {
            "physical_cores": str(numbering.physical),
            "logical_core_size": str(numbering.lnc),
            "source.visible": how_visible,
            "source.core_ids": numbering.source,
            "source.physical_cores": physical_source if physical is not None else "neuron-ls nc_count x LNC",
            "source.logical_core_size": lnc.source,
            "source.peers": links_source if links is not None else f"unknown: {links_source}",
            "source.numa_node": numa_source if numa is not None else f"unknown: {numa_source}",
            "source.model": decision.source,
            "source.memory_bytes": memory_source,
        }
        if bdf:
            attributes["source.pci_bus_id"] = "neuron-ls bdf"
        if cpus:
            attributes["cpu_affinity"] = cpus
        serial = None
        if sd is not None:
            serial = sysfs.parse_serial(sd.serial.text) if sd.serial.text is not None else None
            attributes["source.serial"] = (
                "sysfs info/serial_number" if serial else f"unknown: {sd.serial.path}: {sd.serial.error or 'empty'}"
            )
        devices.append(
            Device(
                id=f"neuron:{i}",
                family=FAMILY,
                index=i,
                model=gen.accelerator_type if gen else identity.UNKNOWN,
                memory_bytes=memory,
                core_ids=numbering.ids,
                numa_node=-1 if numa is None else numa,
                pci_bus_id=bdf,
                peers=tuple(f"neuron:{p}" for p in (links or ()) if p in visible),
                external_peers=tuple(f"neuron:{p}" for p in (links or ()) if p not in visible),
                serial=serial,
                architecture=arch_type or (gen.accelerator_type if gen else None),
                attributes=attributes,
            )
        )
    if len(set(per_device.values())) > 1:
        shown = ", ".join(f"neuron:{i} {n}" for i, n in per_device.items())
        raise limits.BadData(f"devices report different core counts: {shown}")
    if denied:
        warnings.insert(0, _denied_warning(src.neuron_root, denied, src.ls is not None))
    if no_links:
        warnings.append(
            f"links of {ids_text(no_links)} unknown: sysfs connected_devices unreadable and "
            f"neuron-ls {'does not list them' if src.ls is not None else 'unavailable (' + str(src.ls_error) + ')'}; "
            "planning cannot use NeuronLink topology"
        )
    if no_numa:
        first = next(iter(no_numa.values()))
        warnings.append(f"NUMA node of {ids_text(list(no_numa))} unknown: {first}")
    if no_memory:
        kind = "generation unknown" if gen is None else f"{gen.accelerator_type} is not in the architecture table"
        warnings.append(f"memory size of {ids_text(no_memory)} unknown (no neuron-ls memory_size, {kind})")
    if lnc.assumed and from_physical:
        warnings.append(
            f"logical cores of {ids_text(from_physical)}: {lnc.source}, as neither {cores.LNC_ENV} nor neuron-ls "
            f"says otherwise; set {cores.LNC_ENV} if the runtime groups them"
        )
    host_devices = _host_devices(by_sysfs, ls, src)
    instance = identity.instance_type(gen, host_devices, hints, dmi_reason)
    warnings += instance.warnings
    used = [
        name
        for name, on in (
            ("sysfs", bool(by_sysfs)),
            ("neuron-ls", bool(ls)),
            ("pci", bool(src.pci)),
            ("/dev", bool(src.dev)),
        )
        if on
    ]
    return Inventory(
        devices=tuple(devices),
        generation=gen,
        generation_source=decision.source,
        instance=instance,
        lnc=lnc,
        warnings=tuple(warnings),
        sources=tuple(used),
    )


def _bdfs(visible: Mapping[int, str], ls: Mapping[int, LsDevice]) -> dict[int, str]:
    out = {}
    for i in visible:
        bdf = ls[i].bdf if i in ls else None
        if bdf:
            out[i] = bdf
    return out


def _host_devices(by_sysfs: Mapping[int, SysfsDevice], ls: Mapping[int, LsDevice], src: Sources) -> int | None:
    """The host's device count, for the shape rule: sysfs shows the host's
    devices even in a container; a neuron-ls listing only when it is
    complete (indexes 0..n-1, no link outside)."""
    if by_sysfs:
        return len(by_sysfs)
    if src.neuron_pci:
        return len(src.neuron_pci)
    if ls and sorted(ls) == list(range(len(ls))) and all(p in ls for d in ls.values() for p in d.connected or ()):
        return len(ls)
    return None


def _denied_warning(root: str, denied: Sequence[tuple[int, str]], have_ls: bool) -> str:
    names = sorted({name for _, name in denied})
    indexes = format_visible_ids(sorted({i for i, _ in denied}), "ranges")
    shown = f"{root}/neuron{{{indexes}}}/{{{','.join(names)}}}"
    fallback = ["cores counted from neuron_coreN directories"] if "core_count" in names else []
    if "connected_devices" in names:
        fallback.append("links from neuron-ls" if have_ls else "links unknown (neuron-ls unavailable)")
    return f"not readable by this user (root-only, mode 0400, in the Neuron driver): {shown}; {', '.join(fallback)}"
