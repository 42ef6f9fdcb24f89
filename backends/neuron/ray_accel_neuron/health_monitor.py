"""The Neuron health monitor: reads the driver's health nodes each poll and
applies the Neuron rule (`health_rule`, where what is fatal and what makes a
device healthy again is written down).

It reads sysfs and /dev (plain bounded file reads and stats), and the
latest report of the host's one neuron-monitor, which it owns: it lives in
the health decider, one per host, and starts the child on its first poll
(unless `RAYACCEL_NEURON_MONITOR=off` or none is found). Its
`neuron_hw_counters` stand in for ECC nodes sysfs does not have; the whole
report is handed on (`readings`) for the exporters' samples, so no exporter
starts a neuron-monitor of its own. What it knew at discovery, it checks:
a device whose sysfs directory or /dev node existed then and is gone now
has gone away.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from ray_accel.core.devices import Device
from ray_accel.plugins.rule_monitor import RuleMonitor
from ray_accel_neuron import health_rule, limits, sysfs
from ray_accel_neuron.config import Config
from ray_accel_neuron.health_rule import NeuronObservation, NeuronReading, NeuronSettings, Node
from ray_accel_neuron.monitor import READINGS_KEY, MonitorStream, Report
from ray_accel_neuron.tools import find_tool

T = TypeVar("T")


def read_node(path: str, parse: Callable[[str, str], T]) -> Node[T]:
    """A health node: its parsed value, why it cannot be read, or absent."""
    r = sysfs.read(path)
    if r.text is None:
        return Node() if r.absent else Node(error=f"{path}: {r.error}")
    try:
        return Node(parse(r.text, r.path))
    except limits.BadData as e:
        return Node(error=str(e))


def read_count(path: str) -> Node[int]:
    """An ECC counter file ("%u\\n")."""
    return read_node(path, sysfs.parse_u64)


def read_components(path: str) -> Node[sysfs.UnhealthyComponents]:
    return read_node(path, sysfs.parse_unhealthy_components)


class NeuronHealthMonitor(RuleMonitor[health_rule.NeuronState, NeuronObservation]):
    def __init__(
        self, cfg: Config, devices: Sequence[Device], settings: NeuronSettings, clock: Callable[[], float] = time.time
    ) -> None:
        self.cfg = cfg
        self.devices = tuple(sorted(devices, key=lambda d: d.index))
        # What existed at discovery: only its going away means the device went away.
        self._had_dir = {d.index for d in self.devices if os.path.isdir(self._device_dir(d.index))}
        self._had_node = {d.index for d in self.devices if os.path.exists(self._dev_node(d.index))}
        path = None if cfg.monitor_off else find_tool("neuron-monitor", cfg.monitor)
        self.stream = None if path is None else MonitorStream(path, cfg.monitor_period_s, cfg.environ)
        self._latest: tuple[Report | None, str | None] = (None, "not polled yet")
        super().__init__(
            health_rule.RULE, health_rule.initial(tuple(d.id for d in self.devices), settings, clock()), clock
        )

    def _device_dir(self, index: int) -> str:
        return os.path.join(self.cfg.neuron_root, f"neuron{index}")

    def _dev_node(self, index: int) -> str:
        return os.path.join(self.cfg.dev_root, f"neuron{index}")

    def _counters(self, index: int) -> Node[Mapping[str, int]]:
        """The device's `neuron_hw_counters` row in the latest report, or why there is none."""
        if self.stream is None:
            return Node()
        report, why = self._latest
        if report is None:
            return Node(error=f"neuron-monitor: {why}")
        row = report.hw_counters.get(index)
        if row is None:
            return Node(error=f"neuron-monitor's neuron_hw_counters has no neuron_device_index {index}")
        return Node(row)

    def _reading(self, d: Device) -> NeuronReading:
        i = d.index
        gone = []
        if i in self._had_dir and not os.path.isdir(self._device_dir(i)):
            gone.append(f"its sysfs directory {self._device_dir(i)} is gone")
        if i in self._had_node and not os.path.exists(self._dev_node(i)):
            gone.append(f"its device node {self._dev_node(i)} is gone")
        if gone:
            return NeuronReading(device_id=d.id, present=False, absent_why="; ".join(gone))
        present = True if (i in self._had_dir or i in self._had_node) else None
        hw = os.path.join(self._device_dir(i), "stats", "hardware")
        return NeuronReading(
            device_id=d.id,
            present=present,
            ecc={name: read_count(os.path.join(hw, name)) for name in sysfs.ECC_FILES},
            components=read_components(
                os.path.join(self._device_dir(i), sysfs.HEALTH_STATUS_DIR, "unhealthy_components")
            ),
            counters=self._counters(i),
        )

    def observe(self) -> NeuronObservation:
        """What sysfs, /dev and neuron-monitor show now (I/O only; the rule decides)."""
        if self.stream is not None:
            self._latest = self.stream.latest()
        return NeuronObservation(tuple(self._reading(d) for d in self.devices))

    def readings(self) -> Mapping[str, object] | None:
        if self.stream is None:
            return None
        report, why = self._latest
        return {READINGS_KEY: None if report is None else report.data, "why": why}
