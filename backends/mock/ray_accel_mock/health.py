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
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from ray_accel_cuda import health_rule as cuda_rule
from ray_accel_neuron import health_rule as neuron_rule
from ray_accel_neuron import runtime as neuron_runtime
from ray_accel_neuron.sysfs import DEVICE_UNREACHABLE, ECC_FILES, UnhealthyComponents

from ray_accel.core import health_track
from ray_accel.core.devices import Device
from ray_accel.core.health import HealthEvent, HealthReport
from ray_accel.core.health_kept import KeptDevice
from ray_accel.core.health_track import Findings, Level
from ray_accel.plugins.interface import HealthMonitor
from ray_accel_mock.faults import (
    CURRENT_KINDS,
    FAULTS_ENV,
    RECOVERY_ACTIONS,
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


class MockHealthMonitor(HealthMonitor):
    def __init__(
        self,
        spec: HostSpec,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        env = os.environ if environ is None else environ
        self.spec = spec
        self.environ = env
        self.clock = clock
        self.devices = tuple(sorted(spec.devices, key=lambda d: d.index))
        self.neuron = spec.family == neuron_runtime.FAMILY
        self._ids = tuple(d.id for d in self.devices)
        k = health_track.recovery_polls(env)
        now = clock()
        self._taken: set[tuple[str, str, str, int]] = set()
        self._lock = threading.Lock()
        # What the file's counters read when the monitor starts: the rule's baseline, as if read once.
        try:
            start = self._faults().counters
        except FaultFileError:
            start = {}
        self._state: neuron_rule.State | cuda_rule.State
        if self.neuron:
            self._grown = {(d, name): 0 for d in self._ids for name in ECC_FILES}
            base = {key: start.get(key, 0) for key in self._grown}
            first = neuron_rule.initial(self._ids, neuron_rule.Settings(k), now)
            self._state = neuron_rule.State(first.settings, first.tracked, base, frozenset(base))
        else:
            self._grown = {(d, cuda_rule.ECC_CODE): 0 for d in self._ids}
            settings = cuda_rule.Settings(cuda_rule.ignored_xids(env), k)
            self._state = cuda_rule.State(
                settings,
                cuda_rule.initial(self._ids, settings, now).tracked,
                {d: start.get((d, cuda_rule.ECC_CODE), 0) for d in self._ids},
            )

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

    def _neuron_observation(self, faults: Faults | None, failure: str | None, now: float) -> neuron_rule.Observation:
        marks = self._marks(now)
        if faults is None or faults.fail:
            why = failure or "mock health source failed (injected)"
            node: neuron_rule.Node[int] = neuron_rule.Node(error=why)
            devices = tuple(
                neuron_rule.DeviceReading(
                    d,
                    None,
                    presence_error=why,
                    ecc=dict.fromkeys(ECC_FILES, node),
                    components=neuron_rule.Node(error=why),
                )
                for d in self._ids
            )
            return neuron_rule.Observation(devices, (why,), marks)
        for e in self._take(faults):
            self._grown[(e.device, e.code)] += e.count
        readings = []
        for d in self._ids:
            if d in faults.lost:
                readings.append(neuron_rule.DeviceReading(d, False, absent_why="lost in the mock fault file"))
                continue
            readings.append(
                neuron_rule.DeviceReading(
                    d,
                    True,
                    ecc={name: neuron_rule.Node(self._count(faults, d, name)) for name in ECC_FILES},
                    components=neuron_rule.Node(current_components(faults.events, d)),
                )
            )
        return neuron_rule.Observation(tuple(readings), (), marks)

    def _cuda_observation(self, faults: Faults | None, failure: str | None, now: float) -> cuda_rule.Observation:
        marks = self._marks(now)
        if faults is None or faults.fail:
            why = failure or "mock health source failed (injected)"
            gpus = tuple(cuda_rule.GpuReading(d, None, presence_error=why) for d in self._ids)
            return cuda_rule.Observation(gpus, (), "failed", why, (), marks)
        recovery = {
            e.device: cuda_rule.Recovery(RECOVERY_ACTIONS.index(e.code), e.code)
            for e in faults.events
            if e.kind == "recovery"
        }
        xids = []
        for e in self._take(faults):
            if e.kind == "xid":
                xids.append(cuda_rule.Xid(e.device, int(e.code), e.fatal))
            else:
                self._grown[(e.device, e.code)] += e.count
        gpus = tuple(
            cuda_rule.GpuReading(d, False, absent_why="lost in the mock fault file")
            if d in faults.lost
            else cuda_rule.GpuReading(d, True, ecc=self._count(faults, d, cuda_rule.ECC_CODE), recovery=recovery.get(d))
            for d in self._ids
        )
        return cuda_rule.Observation(gpus, tuple(xids), "read", None, (), marks)

    def poll(self) -> HealthReport:
        with self._lock:
            now = self.clock()
            faults: Faults | None
            failure = None
            try:
                faults = self._faults()
            except FaultFileError as e:
                faults, failure = None, str(e)
            if isinstance(self._state, neuron_rule.State):
                self._state, report = neuron_rule.step(self._state, self._neuron_observation(faults, failure, now), now)
            else:
                self._state, report = cuda_rule.step(self._state, self._cuda_observation(faults, failure, now), now)
            return report

    def clear(self, device_id: str) -> None:
        with self._lock:
            if isinstance(self._state, neuron_rule.State):
                self._state = neuron_rule.clear(self._state, device_id)
            else:
                self._state = cuda_rule.clear(self._state, device_id)

    def kept(self) -> tuple[KeptDevice, ...]:
        with self._lock:
            if isinstance(self._state, neuron_rule.State):
                return neuron_rule.kept(self._state)
            return cuda_rule.kept(self._state)

    def resume(self, kept: Sequence[KeptDevice]) -> None:
        with self._lock:
            if isinstance(self._state, neuron_rule.State):
                self._state = neuron_rule.resumed(self._state, kept)
            else:
                self._state = cuda_rule.resumed(self._state, kept)
