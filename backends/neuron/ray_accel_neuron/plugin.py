"""The Neuron DevicePlugin: reads every source, merges them, never aborts
discovery for what the machine reports.

Sources, cheapest first: the Neuron sysfs tree, /dev/neuronN, PCI sysfs and
DMI (plain file reads); `neuron-ls` only when those leave a fact open (links
unreadable by a non-root user on a host whose links are not known from the
architecture, NUMA that needs a BDF, a generation sysfs cannot name, a sysfs
layout this backend does not read, or no sysfs at all), so a root process on
a host whose Neuron functions share one NUMA node starts no subprocess.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from ray_accel.core.checks import CheckResult, RepairResult
from ray_accel.core.devices import Device, HostInfo, all_core_ids
from ray_accel.core.visibility import format_visible_ids
from ray_accel.plugins.check_runner import child_command, find_device, run_check_child
from ray_accel.plugins.interface import DevicePlugin
from ray_accel_neuron import arch, config, health_rule, limits, merge, sysfs
from ray_accel_neuron.health_monitor import NeuronHealthMonitor
from ray_accel_neuron.neuron_ls import PATH_ENV, LsListing, NeuronLsError, run_listing
from ray_accel_neuron.repair import operator_repair
from ray_accel_neuron.runtime import COLLECTIVES, FAMILY, PROTECTED_ENV, TRAITS, VISIBLE_ENV, NeuronRuntime
from ray_accel_neuron.sysfs import PciFunction, SysfsDevice
from ray_accel_neuron.telemetry import NeuronTelemetry
from ray_accel_neuron.tools import find_tool

log = logging.getLogger(__name__)


def _links_from_architecture(devices: tuple[SysfsDevice, ...]) -> bool:
    """Every device names a generation whose links the architecture gives (Trainium3)."""
    gens = [arch.from_device_name(d.device_name.text or "") for d in devices]
    return all(g is not None and g.fabric == arch.ALL_TO_ALL for g in gens)


def _needs_neuron_ls(devices: tuple[SysfsDevice, ...], pci: Mapping[str, PciFunction]) -> list[str]:
    """What sysfs leaves open that neuron-ls can give; empty when nothing."""
    if not devices:
        return ["no Neuron sysfs tree"]
    layout = sysfs.layout_problem(devices)
    if layout:
        return ["every fact (the sysfs layout is not one this backend reads)"]
    why = []
    if any(d.connected.text is None for d in devices) and not _links_from_architecture(devices):
        why.append("links (connected_devices unreadable)")
    if len({fn.numa_node for fn in pci.values()}) != 1 or None in {fn.numa_node for fn in pci.values()}:
        why.append("NUMA (needs each device's BDF)")
    if any(not (d.device_name.text or "").strip() for d in devices):
        why.append("generation (device_name unreadable)")
    return why


class NeuronPlugin(DevicePlugin):
    name = "neuron"
    resource_name = "neuron_cores"
    visible_ids_env = VISIBLE_ENV
    family = FAMILY
    collectives = COLLECTIVES
    protected_env = PROTECTED_ENV
    traits = TRAITS

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        # User configuration is checked here, before any hardware is touched:
        # a bad value is an InputError naming the variable (exit 2).
        self._config = config.from_environ(dict(os.environ if environ is None else environ))
        self._inventory: merge.Inventory | None = None
        self._telemetry: NeuronTelemetry | None = None
        self._health: NeuronHealthMonitor | None = None
        self._extra_warnings: list[str] = []

    # -- discovery ---------------------------------------------------------

    def _sources(self) -> merge.Sources:
        cfg = self._config
        listed, list_error = sysfs.list_device_dirs(cfg.neuron_root)
        devices = tuple(sysfs.read_device(i, p) for i, p in listed)
        pci = {fn.bdf: fn for fn in sysfs.neuron_pci_functions(cfg.sys_root)}
        neuron_pci = tuple(sorted(pci))
        listing: LsListing | None = None
        ls_error = None
        path = find_tool("neuron-ls", cfg.neuron_ls)
        needed = _needs_neuron_ls(devices, pci)
        if needed and path is None:
            ls_error = f"not found ({PATH_ENV}, /opt/aws/neuron/bin, PATH)"
        elif needed and path is not None:
            try:
                listing = run_listing(path, cfg.ls_timeout_s, cfg.environ)
            except NeuronLsError as e:
                ls_error = str(e)
                log.info("neuron-ls unusable: %s", e)
            for d in listing.devices if listing else ():
                if d.bdf and d.bdf not in pci:
                    fn = sysfs.pci_function(cfg.sys_root, d.bdf)
                    if fn is not None:
                        pci[d.bdf] = fn
        elif not needed:
            ls_error = "not run: sysfs gave every fact"
        file_lnc, lnc_problem = (None, None) if cfg.env_lnc is not None else config.read_lnc_file(cfg.lnc_file)
        src = merge.Sources(
            neuron_root=cfg.neuron_root,
            dev_root=cfg.dev_root,
            sysfs=devices,
            sysfs_error=list_error,
            sysfs_layout=sysfs.layout_problem(devices),
            dev=sysfs.dev_nodes(cfg.dev_root),
            pci=pci,
            neuron_pci=neuron_pci,
            ls=None if listing is None else listing.devices,
            ls_error=ls_error,
            ls_path=path,
            ls_format=None if listing is None else listing.format,
            ls_unread=() if listing is None else listing.unread,
            dmi=sysfs.dmi_product_name(cfg.sys_root),
            env_lnc=cfg.env_lnc,
            file_lnc=file_lnc,
        )
        self._extra_warnings = [lnc_problem] if lnc_problem else []
        if listing is None and ls_error and needed and devices:
            self._extra_warnings.append(f"neuron-ls {ls_error}; it was needed for: {', '.join(needed)}")
        return src

    def probe(self) -> str | None:
        self._inventory = None
        try:
            src = self._sources()
            inventory = merge.merge(src)
        except limits.BadData as e:
            return str(e)
        if not inventory.devices:
            return "no Neuron devices visible"
        self._inventory = inventory
        return None

    def list_devices(self) -> tuple[Device, ...]:
        return self._inventory.devices if self._inventory else ()

    def host_info(self) -> HostInfo:
        inv = self._inventory
        devices = self.list_devices()
        attributes = {"sources": ",".join(inv.sources)} if inv else {}
        warnings: tuple[str, ...] = ()
        if inv is not None:
            attributes.update(
                {
                    "source.accelerator_type": inv.generation_source,
                    "source.instance_type": inv.instance.source,
                    "logical_core_size": str(inv.lnc.size),
                    "source.logical_core_size": inv.lnc.source,
                }
            )
            warnings = (*self._extra_warnings, *inv.warnings)
        return HostInfo(
            plugin=self.name,
            family=self.family,
            accelerator_type=inv.generation.accelerator_type if inv and inv.generation else None,
            resource_name=self.resource_name,
            visible_ids_env=self.visible_ids_env,
            device_count=len(devices),
            core_count=len(all_core_ids(devices)),
            instance_type=inv.instance.value if inv else None,
            attributes=attributes,
            warnings=warnings,
        )

    @property
    def runtime(self) -> NeuronRuntime:
        return NeuronRuntime()

    def check(self, device_id: str, timeout_s: float) -> CheckResult:
        """A matrix product on the device's cores against the CPU's
        (`ray_accel_neuron.check`), in a child that sees the device's cores alone."""
        device = find_device(self.list_devices(), device_id)
        return run_check_child(
            device_id=device_id,
            command=child_command("ray_accel_neuron.check"),
            visible_env=self.visible_ids_env,
            # The runtime reads one index or an inclusive range; a device's cores are one range.
            visible_value=format_visible_ids(device.core_ids, "ranges"),
            timeout_s=timeout_s,
            extra_env=self.process_env(),
        )

    def repair(self, device_id: str) -> RepairResult:
        """The operator's: AWS publishes no reset of one device (`ray_accel_neuron.repair`)."""
        find_device(self.list_devices(), device_id)
        return operator_repair(device_id)

    @property
    def telemetry(self) -> NeuronTelemetry:
        # One instance per plugin: it keeps the decider's latest readings.
        if self._telemetry is None:
            self._telemetry = NeuronTelemetry(self._config, self.list_devices())
        return self._telemetry

    @property
    def health(self) -> NeuronHealthMonitor:
        # One per plugin: it keeps the rule's state (baselines, open faults) between
        # polls, and owns the host's neuron-monitor (the decider polls it).
        if self._health is None:
            settings = health_rule.NeuronSettings(self._config.recovery_polls)
            self._health = NeuronHealthMonitor(self._config, self.list_devices(), settings)
        return self._health
