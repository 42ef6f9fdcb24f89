"""The Neuron DevicePlugin: sysfs first, `neuron-ls` as fallback."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ray_accel.core.devices import FAMILY_NEURON, Device, NodeInfo, all_core_ids
from ray_accel.plugins.interface import DevicePlugin
from ray_accel_neuron import sysfs
from ray_accel_neuron.arch import INFERENTIA2, TRAINIUM, TRAINIUM2, Arch, classify, logical_core_size
from ray_accel_neuron.neuron_ls import PATH_ENV, LsDevice, NeuronLsError, find_neuron_ls, run_neuron_ls
from ray_accel_neuron.runtime import NeuronRuntime
from ray_accel_neuron.telemetry import NeuronTelemetry

SYSFS_ENV = "RAYACCEL_NEURON_SYSFS_ROOT"
DMI_PRODUCT = "/sys/devices/virtual/dmi/id/product_name"  # EC2 puts the instance type here

log = logging.getLogger(__name__)


def _guess_arch_from_shape(ls: Sequence[LsDevice]) -> Arch:
    # neuron-ls JSON names no architecture: the shape tells them apart.
    first = ls[0]
    if first.nc_count >= 8 or (first.memory_bytes or 0) > 64 * 1024**3:
        return TRAINIUM2
    if len(ls) > 1 and len(first.connected) == 2:
        return INFERENTIA2
    return TRAINIUM


def number_cores(counts: Sequence[int]) -> list[tuple[int, ...]]:
    """Global core ids as the runtime numbers them: consecutive, by device index."""
    out, nxt = [], 0
    for n in counts:
        out.append(tuple(range(nxt, nxt + n)))
        nxt += n
    return out


class NeuronPlugin(DevicePlugin):
    name = "neuron"
    resource_name = "neuron_cores"
    visible_ids_env = "NEURON_RT_VISIBLE_CORES"
    family = FAMILY_NEURON

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._env = dict(os.environ if environ is None else environ)
        self._root = Path(self._env.get(SYSFS_ENV, sysfs.DEFAULT_ROOT))
        self._devices: tuple[Device, ...] = ()
        self._arch: Arch | None = None
        self._instance_type: str | None = None
        self.source: str | None = None

    def probe(self) -> str | None:
        raw = sysfs.read_tree(self._root)
        if raw:
            self._from_sysfs(raw)
            return None
        path = find_neuron_ls(self._env)
        if path is None:
            return f"no Neuron devices under {self._root} and no neuron-ls ({PATH_ENV}, /opt/aws/neuron/bin, PATH)"
        try:
            ls = run_neuron_ls(path)
        except NeuronLsError as e:
            return str(e)
        if not ls:
            return f"{path} found no Neuron devices"
        self._from_neuron_ls(ls, path)
        return None

    def _dmi_instance_type(self) -> str | None:
        text = sysfs.read_text(Path(DMI_PRODUCT))
        return text if text and classify(text) else None

    def _from_sysfs(self, raw: Sequence[sysfs.RawDevice]) -> None:
        first = raw[0]
        self._instance_type = first.instance_type or self._dmi_instance_type()
        arch = classify(first.device_name, first.arch_type, self._instance_type) or TRAINIUM
        lnc = logical_core_size(arch, self._env)
        cores = number_cores([max(1, r.core_count // lnc) for r in raw])
        self._arch, self.source = arch, "sysfs"
        self._devices = tuple(
            Device(
                id=f"neuron:{r.index}",
                family=FAMILY_NEURON,
                index=r.index,
                model=arch.accelerator_type,
                memory_bytes=arch.memory_bytes,
                core_ids=cores[i],
                numa_node=r.numa_node,
                pci_bus_id=r.bdf,
                peers=tuple(f"neuron:{c}" for c in r.connected if c != r.index),
                serial=r.serial,
                architecture=r.arch_type or arch.accelerator_type,
                attributes={
                    "source": "sysfs",
                    "physical_cores": str(r.core_count),
                    "logical_core_size": str(lnc),
                    "memory_source": "architecture table",
                },
            )
            for i, r in enumerate(raw)
        )

    def _from_neuron_ls(self, ls: Sequence[LsDevice], path: str) -> None:
        ls = sorted(ls, key=lambda d: d.index)
        self._instance_type = self._dmi_instance_type()
        arch = classify(self._instance_type) or _guess_arch_from_shape(ls)
        lnc = logical_core_size(arch, self._env)
        logical = [max(1, d.nc_count // lnc) for d in ls]
        numbered = number_cores(logical)
        devices = []
        for i, d in enumerate(ls):
            # Trust the tool's own numbering when it is in logical cores.
            core_ids = d.core_ids if d.core_ids is not None and len(d.core_ids) == logical[i] else numbered[i]
            devices.append(
                Device(
                    id=f"neuron:{d.index}",
                    family=FAMILY_NEURON,
                    index=d.index,
                    model=arch.accelerator_type,
                    memory_bytes=d.memory_bytes or arch.memory_bytes,
                    core_ids=core_ids,
                    numa_node=d.numa_node,
                    pci_bus_id=d.bdf,
                    peers=tuple(f"neuron:{c}" for c in d.connected if c != d.index),
                    architecture=arch.accelerator_type,
                    attributes={
                        "source": f"neuron-ls ({path})",
                        "physical_cores": str(d.nc_count),
                        "logical_core_size": str(lnc),
                        "pids": ",".join(map(str, d.pids)),
                    },
                )
            )
        self._arch, self.source, self._devices = arch, "neuron-ls", tuple(devices)

    def list_devices(self) -> tuple[Device, ...]:
        return self._devices

    def node_info(self) -> NodeInfo:
        return NodeInfo(
            plugin=self.name,
            family=self.family,
            accelerator_type=self._arch.accelerator_type if self._arch else None,
            resource_name=self.resource_name,
            visible_ids_env=self.visible_ids_env,
            device_count=len(self._devices),
            core_count=len(all_core_ids(self._devices)),
            instance_type=self._instance_type,
            attributes={"source": self.source or "none"},
        )

    @property
    def runtime(self) -> NeuronRuntime:
        return NeuronRuntime()

    @property
    def telemetry(self) -> NeuronTelemetry:
        return NeuronTelemetry(self._root, self._devices, self.source)
