"""The Neuron DevicePlugin: sysfs first, `neuron-ls` as fallback."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ray_accel.devices import FAMILY_NEURON, Device, NodeInfo, all_core_ids
from ray_accel.plugin import DevicePlugin
from ray_accel.runtime import RankInfo, base_worker_env
from ray_accel.samples import DeviceSample
from ray_accel_neuron import sysfs
from ray_accel_neuron.arch import INFERENTIA2, TRAINIUM, TRAINIUM2, Arch, classify, logical_core_size
from ray_accel_neuron.neuron_ls import PATH_ENV, LsDevice, NeuronLsError, find_neuron_ls, run_neuron_ls

SYSFS_ENV = "RAYACCEL_NEURON_SYSFS_ROOT"
DMI_PRODUCT = "/sys/devices/virtual/dmi/id/product_name"  # EC2 puts the instance type here
EFA_CLASS = "/sys/class/infiniband"

log = logging.getLogger(__name__)


def efa_present(root: str = EFA_CLASS) -> bool:
    try:
        return any(name.startswith(("efa", "rdmap")) for name in os.listdir(root))
    except OSError:
        return False


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

    def held_by_processes(self) -> dict[str, tuple[int, ...]]:
        """Device id -> pids the tools say hold it (for orphan detection)."""
        out = {}
        for d in self._devices:
            pids = tuple(int(p) for p in d.attributes.get("pids", "").split(",") if p)
            if pids:
                out[d.id] = pids
        return out

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

    def gather_node_metrics(self) -> list[DeviceSample]:
        out = []
        for d in self._devices:
            used: int | None = None
            ecc: dict[str, int] = {}
            if self.source == "sysfs":
                per_core = [
                    sysfs.core_memory_used(self._root, d.index, c) for c in range(int(d.attributes["physical_cores"]))
                ]
                known = [v for v in per_core if v is not None]
                used = sum(known) if known else None
                ecc = {k: v for k, v in sysfs.ecc_uncorrected(self._root, d.index).items() if v > 0}
            gone = self.source == "sysfs" and not (self._root / f"neuron{d.index}").is_dir()
            reason = (
                "device disappeared from sysfs" if gone else (", ".join(f"{k}={v}" for k, v in ecc.items()) or None)
            )
            out.append(
                DeviceSample(
                    device_id=d.id,
                    utilization=None,  # the sysfs tree has no utilisation counter
                    memory_used_bytes=used,
                    memory_total_bytes=d.memory_bytes,
                    healthy=reason is None,
                    health_reason=reason,
                )
            )
        return out

    def collective_backend(self) -> str:
        return "xla"

    def worker_env(self, rank: RankInfo, visible_ids: Sequence[int]) -> dict[str, str]:
        env = base_worker_env(self.visible_ids_env, rank, visible_ids)
        per_process = max(1, len(visible_ids) // rank.local_world_size)
        env.update(
            {
                "PJRT_DEVICE": "NEURON",
                "NEURON_RT_ROOT_COMM_ID": f"{rank.master_addr}:{rank.root_comm_port}",
                "NEURON_PJRT_PROCESS_INDEX": str(rank.world_rank),
                "NEURON_PJRT_PROCESSES_NUM_DEVICES": ",".join([str(per_process)] * rank.world_size),
                "NEURON_PJRT_WORLD_SIZE": str(rank.world_size),
            }
        )
        if efa_present():
            env.update({"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1"})
        return env
