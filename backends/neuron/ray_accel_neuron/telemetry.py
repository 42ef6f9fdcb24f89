"""Neuron telemetry, each value from the source that has it.

- Memory used: sysfs `neuron_coreC/stats/memory_usage/device_mem/total`
  summed over the device's physical cores (readable by any user); without
  sysfs, neuron-monitor's `memory_used` per core.
- Recent events: the uncorrected ECC errors of sysfs
  `stats/hardware/*ecc_uncorrected` (`mem_ecc_repairable_uncorrected` too),
  summed; without sysfs, neuron-monitor's `neuron_hw_counters`; with
  neither, None. A count, not a verdict: health is the Neuron rule's.
- Utilisation: neuron-monitor only (see `monitor`); None without it.
- neuron-monitor's report is the host's one, which the health decider's
  monitor owns and hands on (`use_host_readings`); no telemetry starts one.
  Without the decider's fresh readings its values are unknown, never zero.
- Power and temperature: no source gives them. sysfs `stats/power/utilization`
  is a percentage of an undocumented maximum, not watts, and neither
  neuron-ls nor neuron-monitor report power or temperature, so both stay None.
- neuron-ls gives no memory, health or utilisation; it gives the processes
  holding each device (`device_holders`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Mapping

from ray_accel.core.devices import Device
from ray_accel.core.samples import DeviceSample
from ray_accel.plugins.interface import Telemetry
from ray_accel_neuron import sysfs
from ray_accel_neuron.config import Config
from ray_accel_neuron.monitor import READINGS_KEY, MonitorError, Report, report_of
from ray_accel_neuron.neuron_ls import PATH_ENV, NeuronLsError, run_neuron_ls
from ray_accel_neuron.tools import find_tool

log = logging.getLogger(__name__)


class NeuronTelemetry(Telemetry):
    def __init__(self, cfg: Config, devices: tuple[Device, ...]) -> None:
        self.cfg = cfg
        self.devices = devices
        self._report: Report | None = None
        # Devices sysfs knew at discovery: for them, a vanished directory means a vanished device.
        self._in_sysfs = {d.index for d in devices if os.path.isdir(self._device_dir(d.index))}

    def _device_dir(self, index: int) -> str:
        return os.path.join(self.cfg.neuron_root, f"neuron{index}")

    def use_host_readings(self, readings: Mapping[str, object] | None, why: str | None) -> None:
        # Without fresh readings (`why` says why) the values are unknown: no report.
        self._report = None
        data = None if readings is None else readings.get(READINGS_KEY)
        if data is not None:
            try:
                self._report = report_of(data)
            except MonitorError as e:
                log.warning("neuron-monitor readings not used: %s", e)

    def device_samples(self) -> list[DeviceSample]:
        report = self._report
        out = []
        for d in self.devices:
            in_sysfs = d.index in self._in_sysfs
            if in_sysfs and not os.path.isdir(self._device_dir(d.index)):
                continue  # gone: absent from the samples, as the interface asks
            used: int | None = None
            counts: dict[str, int] | None = None
            if in_sysfs:
                physical = int(d.attributes.get("physical_cores", "0"))
                per_core = [sysfs.core_memory_used(self.cfg.neuron_root, d.index, c) for c in range(physical)]
                known = [v for v in per_core if v is not None]
                used = sum(known) if known else None
                counts = sysfs.ecc_uncorrected(self.cfg.neuron_root, d.index)
            utilization = None
            if report is not None:
                utilization = sum(report.core_utilization.get(c, 0.0) for c in d.core_ids) / len(d.core_ids) / 100
                if used is None and any(c in report.core_memory for c in d.core_ids):
                    used = sum(report.core_memory.get(c, 0) for c in d.core_ids)
                if counts is None and d.index in report.hw_counters:
                    counts = {k: v for k, v in report.hw_counters[d.index].items() if "uncorrected" in k}
            out.append(
                DeviceSample(
                    device_id=d.id,
                    utilization=utilization,
                    memory_used_bytes=used,
                    memory_total_bytes=d.memory_bytes or None,
                    recent_events=None if counts is None else sum(counts.values()),
                )
            )
        return out

    def process_device_memory(self, pids: Collection[int]) -> dict[int, dict[str, int]]:
        """From neuron-monitor's per-runtime memory by core; {} without it."""
        report = self._report
        if report is None:
            return {}
        device_of = {c: d.id for d in self.devices for c in d.core_ids}
        out: dict[int, dict[str, int]] = {}
        for pid in pids:
            for core, nbytes in report.pid_core_memory.get(pid, {}).items():
                dev = device_of.get(core)
                if dev is not None:
                    out.setdefault(pid, {})[dev] = out.get(pid, {}).get(dev, 0) + nbytes
        return out

    def device_holders(self) -> dict[str, tuple[int, ...]]:
        """Device id -> PIDs neuron-ls lists in its `neuron_processes`, for every
        device of this host (an empty tuple: nobody). Runs neuron-ls each call;
        raises NeuronLsError when it is missing or fails, so that "unknown" is
        never read as "nobody"."""
        path = find_tool("neuron-ls", self.cfg.neuron_ls)
        if path is None:
            raise NeuronLsError(f"neuron-ls not found ({PATH_ENV}, /opt/aws/neuron/bin, PATH)")
        listed = {d.index: d for d in run_neuron_ls(path, self.cfg.ls_timeout_s, self.cfg.environ)}
        return {
            d.id: tuple(sorted({p.pid for p in listed[d.index].processes})) if d.index in listed else ()
            for d in self.devices
        }
