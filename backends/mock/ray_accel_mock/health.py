"""The mock's health monitor: the fault file (`faults`) stands for the
vendor's health sources, and the rule is the real backend's (GPU presets:
`ray_accel_cuda.health_rule`; Neuron presets: `ray_accel_neuron.health_rule`),
so what is fatal and what makes a device healthy again on the mock is what
it is on the hardware.

A mock device's sources read clean until the fault file says otherwise: its
error counters read the file's `counters` (0 where it has none), the rule's
baseline when the monitor starts, and an `ecc` entry makes them grow once. A device the spec marks `healthy = false`
is unhealthy for as long as the spec says so (a fault of kind `marked`,
beside the family's own sources).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from ray_accel_cuda import health_rule as cuda_rule
from ray_accel_neuron import health_rule as neuron_rule
from ray_accel_neuron import runtime as neuron_runtime
from ray_accel_neuron.sysfs import DEVICE_UNREACHABLE, ECC_FILES, UnhealthyComponents

from ray_accel.core import health_track
from ray_accel.core.devices import Device
from ray_accel.core.health import HealthEvent
from ray_accel.core.health_track import Findings, Level
from ray_accel.plugins.rule_monitor import Rule, RuleMonitor
from ray_accel_mock.faults import (
    CURRENT_KINDS,
    FAULTS_ENV,
    RECOVERY_VALUES,
    FaultEvent,
    FaultFileError,
    Faults,
    load_faults,
)
from ray_accel_mock.spec import HostSpec


def marked_unhealthy(d: Device) -> bool:
    return d.attributes.get("healthy", "true") != "true"


def current_components(events: tuple[FaultEvent, ...], device_id: str) -> UnhealthyComponents:
    """The device's `unhealthy_components` reading while these entries are in the file."""
    names: list[str] = []
    unreachable = False
    for e in events:
        if e.device == device_id and e.kind == "components":
            if e.code.strip() == DEVICE_UNREACHABLE:
                unreachable = True
            else:
                names += [n for n in e.code.strip().split(",") if n not in names]
    return UnhealthyComponents(tuple(names), unreachable and not names)


class MockHealthMonitor(RuleMonitor[Any, Any]):
    def __init__(
        self,
        spec: HostSpec,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        env = os.environ if environ is None else environ
        self.spec = spec
        self.environ = env
        self.devices = tuple(sorted(spec.devices, key=lambda d: d.index))
        self.neuron = spec.family == neuron_runtime.FAMILY
        self._ids = tuple(d.id for d in self.devices)
        k = health_track.recovery_polls(env)
        now = clock()
        self._taken: set[tuple[str, str, str, int]] = set()
        # What the file's counters read when the monitor starts: the rule's baseline, as if read once.
        try:
            start = self._faults().counters
        except FaultFileError:
            start = {}
        # The family's rule and observation, chosen once.
        rule: Rule[Any, Any]
        state: neuron_rule.NeuronState | cuda_rule.CudaState
        self._observation: Callable[[Faults | None, str | None, float], Any]
        if self.neuron:
            self._grown = {(d, name): 0 for d in self._ids for name in ECC_FILES}
            base = {key: start.get(key, 0) for key in self._grown}
            first = neuron_rule.initial(self._ids, neuron_rule.NeuronSettings(k), now)
            state = neuron_rule.NeuronState(first.settings, first.tracked, base, frozenset(base))
            rule, self._observation = neuron_rule.RULE, self._neuron_observation
        else:
            self._grown = {(d, cuda_rule.ECC_CODE): 0 for d in self._ids}
            settings = cuda_rule.CudaSettings(cuda_rule.ignored_xids(env), k)
            tracked = cuda_rule.initial(self._ids, settings, now).tracked
            state = cuda_rule.CudaState(
                settings, tracked, {d: start.get((d, cuda_rule.ECC_CODE), 0) for d in self._ids}
            )
            rule, self._observation = cuda_rule.RULE, self._cuda_observation
        super().__init__(rule, state, clock)

    def _faults(self) -> Faults:
        return load_faults(self.environ.get(FAULTS_ENV), self._ids, self.spec.family)

    def _count(self, faults: Faults, device: str, name: str) -> int:
        """A counter's reading: the file's value, grown by the `ecc` entries taken."""
        return faults.counters.get((device, name), 0) + self._grown[(device, name)]

    def _take(self, faults: Faults) -> list[FaultEvent]:
        """The file's xid and ecc entries this monitor has not taken yet (each once)."""
        new = []
        for e in faults.events:
            if e.kind not in CURRENT_KINDS and e.key not in self._taken:
                self._taken.add(e.key)
                new.append(e)
        return new

    def _marks(self, now: float) -> tuple[Findings, ...]:
        out = []
        for d in self.devices:
            if marked_unhealthy(d):
                event = HealthEvent(d.id, "marked", None, "marked unhealthy in the mock spec", now, True)
                out.append(Findings(d.id, levels=(Level("marked", event, "not marked unhealthy in the spec"),)))
        return tuple(out)

    def _neuron_observation(
        self, faults: Faults | None, failure: str | None, now: float
    ) -> neuron_rule.NeuronObservation:
        marks = self._marks(now)
        if faults is None or faults.fail:
            why = failure or "mock health source failed (injected)"
            node: neuron_rule.Node[int] = neuron_rule.Node(error=why)
            devices = tuple(
                neuron_rule.NeuronReading(
                    device_id=d,
                    present=None,
                    presence_error=why,
                    ecc=dict.fromkeys(ECC_FILES, node),
                    components=neuron_rule.Node(error=why),
                )
                for d in self._ids
            )
            return neuron_rule.NeuronObservation(devices, (why,), marks)
        for e in self._take(faults):
            self._grown[(e.device, e.code)] += e.count
        readings = []
        for d in self._ids:
            if d in faults.lost:
                readings.append(
                    neuron_rule.NeuronReading(device_id=d, present=False, absent_why="lost in the mock fault file")
                )
                continue
            readings.append(
                neuron_rule.NeuronReading(
                    device_id=d,
                    present=True,
                    ecc={name: neuron_rule.Node(self._count(faults, d, name)) for name in ECC_FILES},
                    components=neuron_rule.Node(current_components(faults.events, d)),
                )
            )
        return neuron_rule.NeuronObservation(tuple(readings), (), marks)

    def _cuda_observation(self, faults: Faults | None, failure: str | None, now: float) -> cuda_rule.CudaObservation:
        marks = self._marks(now)
        if faults is None or faults.fail:
            why = failure or "mock health source failed (injected)"
            gpus = tuple(cuda_rule.GpuReading(device_id=d, present=None, presence_error=why) for d in self._ids)
            return cuda_rule.CudaObservation(gpus, (), "failed", why, (), marks)
        recovery = {}
        for d in self._ids:
            action = faults.recovery_of(d)
            if action is not None:
                recovery[d] = cuda_rule.Recovery(RECOVERY_VALUES[action], action)
        xids = []
        for e in self._take(faults):
            if e.kind == "xid":
                xids.append(cuda_rule.Xid(e.device, int(e.code), e.fatal))
            else:
                self._grown[(e.device, e.code)] += e.count
        gpus = tuple(
            cuda_rule.GpuReading(device_id=d, present=False, absent_why="lost in the mock fault file")
            if d in faults.lost
            else cuda_rule.GpuReading(
                device_id=d, present=True, ecc=self._count(faults, d, cuda_rule.ECC_CODE), recovery=recovery.get(d)
            )
            for d in self._ids
        )
        return cuda_rule.CudaObservation(gpus, tuple(xids), "read", None, (), marks)

    def observe(self) -> Any:
        faults, failure = None, None
        try:
            faults = self._faults()
        except FaultFileError as e:
            failure = str(e)
        return self._observation(faults, failure, self.clock())
