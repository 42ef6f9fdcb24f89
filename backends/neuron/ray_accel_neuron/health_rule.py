"""The Neuron health rule, pure: what the driver's sysfs showed in one poll
-> each device's verdict.

What is fatal, and what makes a device healthy again (node paths as the
Neuron driver lays them out, aws-neuron/aws-neuron-driver 2.24.7.0 to
2.30.2.0: `neuron_sysfs_metrics.c`; see `sysfs`):

- **Uncorrected ECC errors**: `neuronN/stats/hardware/{sram_ecc_uncorrected,
  mem_ecc_uncorrected, mem_ecc_repairable_uncorrected}`, counts since the
  driver loaded. The first reading of each is a baseline, never an event
  (a count already there when monitoring began, or left after a person
  cleared the device, is not news); a count that GROWS between polls is
  fatal, and sticky until cleared by hand: the driver has no "repaired"
  signal (a repairable uncorrected error is repaired by a device reset,
  after which the counts start again; a count that falls is a new
  baseline).
- **Unhealthy components** (Trainium3, driver 2.30.2.0:
  `stats/hardware/health_status/unhealthy_components`, written where the
  driver's `health_status_enabled` is set, V4 only): a non-empty list
  (hbm, sram, link_efa, ...; names the driver's table does not have are
  kept, with a note) or `device_unreachable` (the driver could not read
  the device's health registers) is fatal; the node reading empty for K
  polls in a row (`RAYACCEL_HEALTH_RECOVERY_POLLS`, default 3) makes the
  device healthy again, as the driver itself then says nothing is wrong.
- **Gone**: the device's sysfs directory or its /dev node, present at
  discovery, is gone: fatal; back for K polls in a row: healthy again.

Nodes are read by feature, one by one. Driver 2.31 (Neuron 2.33) "moved
several nodes to new paths" and where is not published, so nothing here
guesses new paths: a node absent since the first poll is simply not a
source on this driver or device (not an error); a node that was read once
and is absent now, unreadable (permission), or not in the driver's format
is unreadable this poll: the device is UNKNOWN unless a fault holds, and the
poll counts toward nothing. A device none of whose nodes exists is UNKNOWN,
and the report says why.

Where sysfs has no `mem_ecc_uncorrected` or `sram_ecc_uncorrected` node,
the same count from neuron-monitor's `neuron_hw_counters` (the host's one
neuron-monitor, see `monitor`) takes its place, with the same rule (first
reading a baseline, growth fatal): chosen by which nodes exist, never by a
driver version. `mem_ecc_repairable_uncorrected` has no neuron-monitor
counterpart and stays sysfs only. An event's reason names its reading's
source (`neuron-monitor mem_ecc_uncorrected grew from 0 to 3`), and each
verdict's `source` which sources it was read from (`sysfs`,
`neuron-monitor`, `sysfs-and-neuron-monitor`); a neuron-monitor that has no
fresh report for the device is an unreadable source, like an unreadable node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Generic, TypeVar

from ray_accel.core import health_kept, health_track
from ray_accel.core.health import HealthEvent, HealthReport, one_line
from ray_accel.core.health_kept import KeptDevice
from ray_accel.core.health_track import Findings, Level, Tracked
from ray_accel.plugins.rule_monitor import Rule
from ray_accel_neuron.sysfs import DEVICE_UNREACHABLE, ECC_FILES, UnhealthyComponents

T = TypeVar("T")
COMPONENTS_NODE = "health_status/unhealthy_components"
NO_NODE = (
    "no health node exists (stats/hardware/*ecc_uncorrected, stats/hardware/health_status/"
    "unhealthy_components): not this driver's layout (driver 2.31 moved sysfs nodes to paths not "
    "published), or a device without them; and no neuron-monitor to read its neuron_hw_counters"
)
# The sysfs counters neuron-monitor's `neuron_hw_counters` also reports, under the same names.
MONITOR_ECC = ("mem_ecc_uncorrected", "sram_ecc_uncorrected")
# The labels an ECC baseline is kept under: by the count's source, so a resumed baseline is the same reading's.
ECC_LABELS = frozenset(ECC_FILES) | {f"neuron-monitor {name}" for name in MONITOR_ECC}
SOURCES = ("sysfs", "neuron-monitor")


@dataclass(frozen=True)
class Node(Generic[T]):
    """One sysfs node in one poll: its value, or why it could not be read;
    neither: the node does not exist."""

    value: T | None = None
    error: str | None = None

    @property
    def absent(self) -> bool:
        return self.value is None and self.error is None


@dataclass(frozen=True, kw_only=True)
class NeuronReading:
    """What sysfs and /dev showed of one device in one poll."""

    device_id: str
    # None: not known; with no presence_error, no presence source (neither a
    # sysfs directory nor a /dev node at discovery).
    present: bool | None
    absent_why: str | None = None  # "its sysfs directory /sys/.../neuron3 is gone"
    presence_error: str | None = None
    ecc: Mapping[str, Node[int]] = field(default_factory=dict)  # by ECC file name
    components: Node[UnhealthyComponents] = field(default_factory=Node)
    # The device's row of neuron-monitor's `neuron_hw_counters`; absent: no neuron-monitor.
    counters: Node[Mapping[str, int]] = field(default_factory=Node)


@dataclass(frozen=True)
class NeuronObservation:
    devices: tuple[NeuronReading, ...]
    errors: tuple[str, ...] = ()
    other: tuple[Findings, ...] = ()  # findings from outside sysfs (the mock's spec), merged per device


@dataclass(frozen=True)
class NeuronSettings:
    recovery_polls: int = health_track.DEFAULT_RECOVERY_POLLS

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> NeuronSettings:
        return cls(health_track.recovery_polls(environ))


@dataclass(frozen=True)
class NeuronState:
    settings: NeuronSettings
    tracked: tuple[Tracked, ...]
    ecc: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (device, file) -> last count
    seen: frozenset[tuple[str, str]] = frozenset()  # (device, node) read at least once

    def device_ids(self) -> tuple[str, ...]:
        return tuple(t.device_id for t in self.tracked)


def initial(device_ids: tuple[str, ...], settings: NeuronSettings, now: float) -> NeuronState:
    return NeuronState(settings, health_track.start(device_ids, now))


def components_event(device_id: str, reading: UnhealthyComponents, now: float) -> HealthEvent:
    if reading.unreachable:
        reason = "the driver cannot read the device's health registers (device_unreachable)"
        return HealthEvent(device_id, "unreachable", DEVICE_UNREACHABLE, reason, now, True)
    reason = "unhealthy components: " + ", ".join(reading.components)
    if reading.unknown:
        reason += f" ({', '.join(reading.unknown)} not in the driver 2.30 table)"
    return HealthEvent(device_id, "components", ",".join(reading.components), reason, now, True)


def _monitor_count(counters: Node[Mapping[str, int]], name: str) -> Node[int]:
    if counters.value is None:
        return Node(error=counters.error)
    if name not in counters.value:
        return Node(error=f"its neuron_hw_counters row has no {name}")
    return Node(counters.value[name])


def _findings(r: NeuronReading, prev: NeuronState, now: float) -> tuple[Findings, set[tuple[str, str]], dict[str, int]]:
    d = r.device_id
    vouched: list[str] = []
    unread: list[str] = []
    events: list[HealthEvent] = []
    levels: list[Level] = []
    seen: set[tuple[str, str]] = set()
    counts: dict[str, int] = {}
    if r.present is False:
        gone = HealthEvent(d, "lost", None, one_line(f"device gone ({r.absent_why or 'absent'})"), now, True)
        return Findings(d, levels=(Level("lost", gone, "present"),)), seen, counts
    if r.present:
        levels.append(Level("lost", None, "present"))
    elif r.presence_error is not None:
        unread.append(f"presence: {r.presence_error}")
    sources: list[str] = []

    def read(node: Node[T], label: str, vouch: str) -> T | None:
        """The node's value; None: unreadable this poll (noted), or not a source at all."""
        if node.absent and (d, label) not in prev.seen:
            return None
        sources.append(label)
        if node.error is not None or node.value is None:
            unread.append(f"{label}: {'absent now, read before' if node.error is None else node.error}")
            return None
        seen.add((d, label))
        vouched.append(vouch)
        return node.value

    for name in ECC_FILES:
        label, node = name, r.ecc.get(name, Node())
        if name in MONITOR_ECC and node.absent and (d, name) not in prev.seen:
            label, node = f"neuron-monitor {name}", _monitor_count(r.counters, name)
        count = read(node, label, label if label != name else f"sysfs {name}")
        if count is not None:
            counts[label] = count
            before = prev.ecc.get((d, label))
            if before is not None and count > before:
                events.append(HealthEvent(d, "ecc", name, f"{label} grew from {before} to {count}", now, True))
    components = read(r.components, COMPONENTS_NODE, f"sysfs {COMPONENTS_NODE}")
    if components is not None:
        bad = None if components.healthy else components_event(d, components, now)
        levels.append(Level("components", bad, "no unhealthy component"))
    if not sources:
        unread.append(NO_NODE)
    return Findings(d, tuple(vouched), tuple(unread), tuple(events), tuple(levels)), seen, counts


def step(previous: NeuronState, obs: NeuronObservation, now: float) -> tuple[NeuronState, HealthReport]:
    """The next state and this poll's report."""
    readings = {r.device_id: r for r in obs.devices}
    findings: dict[str, Findings] = {}
    seen = set(previous.seen)
    ecc = dict(previous.ecc)
    for d in previous.device_ids():
        r = readings.get(d)
        if r is None:
            findings[d] = Findings(d, unread=("not read this poll",))
            continue
        findings[d], read, counts = _findings(r, previous, now)
        seen |= read
        ecc.update({(d, name): n for name, n in counts.items()})
    for f in obs.other:
        if f.device_id in findings:
            findings[f.device_id] = findings[f.device_id].merged(f)
    tracked, report = health_track.step_all(
        previous.tracked, findings, obs.errors, now, previous.settings.recovery_polls
    )
    devices = tuple(replace(v, source=_source(findings[v.device_id].vouched)) for v in report.devices)
    return NeuronState(previous.settings, tracked, ecc, frozenset(seen)), replace(report, devices=devices)


def _source(vouched: tuple[str, ...]) -> str | None:
    """Which sources the device's readings came from this poll: "sysfs",
    "neuron-monitor", "sysfs-and-neuron-monitor"; None: none was read."""
    return "-and-".join(s for s in SOURCES if any(v.startswith(f"{s} ") for v in vouched)) or None


def clear(previous: NeuronState, device_id: str) -> NeuronState:
    tracked = health_track.clear_device(previous.tracked, device_id)
    return NeuronState(previous.settings, tracked, previous.ecc, previous.seen)


def kept(state: NeuronState) -> tuple[KeptDevice, ...]:
    """What of `state` outlives the decider: each device's faults and ECC baselines."""
    counts: dict[str, dict[str, int]] = {}
    for (d, name), n in state.ecc.items():
        counts.setdefault(d, {})[name] = n
    return tuple(health_kept.keep(t, counts.get(t.device_id, {})) for t in state.tracked)


def resumed(state: NeuronState, kept: Sequence[KeptDevice]) -> NeuronState:
    ecc = health_kept.baselines(kept, state.device_ids())
    ecc = {k: n for k, n in ecc.items() if k[1] in ECC_LABELS}
    return NeuronState(state.settings, health_kept.resume(state.tracked, kept), {**state.ecc, **ecc}, state.seen)


RULE: Final = Rule(step, clear, kept, resumed)
