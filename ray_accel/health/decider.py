"""The host's health decider: `python -m ray_accel.health.decider`.

One per host, started by `ray-accel start` in a session of its own (so
restarting a partition, or Ctrl-C in the shell that started it, never kills
it) and recorded in the host record like the raylets' processes (kind
`health_decider`, PID, start time, identity), so `stop` stops it by PID,
first. It alone acts on the host's partitions for their health, so two
partitions never race over a device.

Every `interval_s` it takes the hand-made clears, polls the active backend's
`HealthMonitor` (no monitor: every device unknown), folds the report into
the host's health, hands the monitor's host-wide readings on to the
exporters (`<state dir>/readings.json`, see `plugins.host_readings`), decides
each partition's step (`rules.decide`), acts (`actions`), and writes
`<state dir>/health.json` and what of the rule's state must outlive it
(`health_kept`): a decider that starts resumes from that, so a device out
for a sticky fault stays out whatever it reads now. It ends when the record
is gone, being stopped, or another start's; on SIGTERM, SIGINT or SIGHUP it
undoes a restart half done and exits 0.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ray_accel.cluster import helpers, procs
from ray_accel.cluster import statedir as state
from ray_accel.cluster.exporters import host_level_partition
from ray_accel.cluster.record import HostRecord, RayProcess
from ray_accel.cluster.signals import interruptible
from ray_accel.core.checks import CheckOutcome, CheckResult, NotSupported, RepairOutcome, RepairResult, short
from ray_accel.core.devices import Device
from ray_accel.core.errors import RayAccelError
from ray_accel.core.files import write_atomic
from ray_accel.core.health import DeviceHealth, Health, HealthReport
from ray_accel.core.health_kept import KEPT_FILE, KeptDevice, doubted, read_kept
from ray_accel.core.health_kept import dumps as dump_kept
from ray_accel.core.health_state import (
    HEALTH_FILE,
    MAX_EVENTS,
    HealthSettings,
    HostHealth,
    count_events,
    dumps,
)
from ray_accel.health import proof as prove
from ray_accel.health import rules
from ray_accel.health.proof import Proof
from ray_accel.health.requests import pending_requests, take_checks
from ray_accel.hostops import actions, steps
from ray_accel.hostops.drain import drain
from ray_accel.plugins.discovery import process_backend
from ray_accel.plugins.host_readings import READINGS_FILE, readings_json
from ray_accel.plugins.interface import DevicePlugin, HealthMonitor

log = logging.getLogger("ray_accel.health.decider")


def say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def write_health(directory: Path, health: HostHealth) -> Path:
    """`health.json`, written atomically, 0600."""
    return write_atomic(directory / HEALTH_FILE, dumps(health))


def unknown_report(devices: Sequence[Device], why: str, now: float) -> HealthReport:
    """A poll without a health source: every device unknown."""
    return HealthReport(
        now, tuple(DeviceHealth(d.id, Health.UNKNOWN, now, None, "a health source") for d in devices), (), (why,)
    )


def fold(health: HostHealth, report: HealthReport, extra_errors: Sequence[str]) -> HostHealth:
    """`health` after one more poll's `report`."""
    return replace(
        health,
        at=report.at,
        devices=report.devices,
        events=(*health.events, *report.events)[-MAX_EVENTS:],
        counters=count_events(health.counters, report.events),
        polls=health.polls + 1,
        errors=(*report.errors, *extra_errors),
    )


@dataclass(kw_only=True)
class Decider:
    place: state.Place
    created: float
    settings: HealthSettings
    devices: tuple[Device, ...]
    monitor: HealthMonitor | None
    health: HostHealth
    timeout_s: float = 180.0
    pending: tuple[str, ...] = ()  # errors said at the first poll (why the kept health is unknown)
    drained: set[str] = field(default_factory=set)  # the partitions whose drain this process asked Ray for
    plugin: DevicePlugin | None = None  # the backend that checks and repairs devices
    proofs: dict[str, Proof] = field(default_factory=dict)  # each device's checks and repairs (kept)

    @property
    def host(self) -> actions.Host:
        return actions.Host(self.place, self.devices, self.timeout_s)

    def current(self) -> HostRecord | None:
        """The record this decider serves, None once it is gone, stopping or another start's."""
        try:
            record = state.load(self.place)
        except RayAccelError as e:
            say(f"warning: {e}")
            return None
        if record is None or record.stopping or record.created != self.created:
            return None
        return record

    def poll(self) -> HostRecord | None:
        record = self.current()
        if record is None:
            return None
        asked = pending_requests(self.place.directory)
        by_hand, check_errors = take_checks(self.place.directory)
        for made in by_hand:
            say(f"check {made.device_id} by hand: {made.outcome.value}: {made.detail}")
            self.proofs[made.device_id] = replace(self.proofs.get(made.device_id, Proof()), check=made)
            counts = counted(self.health.check_counts, made.device_id, made.outcome.value)
            self.health = replace(self.health, check_counts=counts)
        errors, self.pending = [*self.pending, *asked.errors, *check_errors], ()
        for c in asked.requests:
            say(f"clear asked for {c.device_id}")
            if self.monitor is not None:
                try:
                    self.monitor.clear(c.device_id)
                except RayAccelError as e:  # a device the monitor does not know: said, not acted on
                    errors.append(f"clear {c.device_id}: {e}")
        now = time.time()
        if self.monitor is None:
            report = unknown_report(self.devices, "the backend has no health monitor: every device is unknown", now)
        else:
            try:
                report = self.monitor.poll()
            except Exception as e:  # a source failing is a poll with nothing known, never the decider's end
                report = unknown_report(self.devices, f"health poll failed: {type(e).__name__}: {e}", now)
            # The monitor's host-wide sources (started by its first poll) serve the exporters too.
            readings = readings_json(self.monitor.readings(), now, self.settings.interval_s)
            write_atomic(self.place.directory / READINGS_FILE, readings)
        for ev in report.events:
            say(f"event {ev.device_id} {ev.kind} {ev.code or ''}: {ev.reason} ({'fatal' if ev.fatal else 'counted'})")
        self.health = fold(self.health, report, errors)
        by_id = {d.device_id: d for d in report.devices}
        checks = procs.check_record(record)
        self.prove_devices(record, by_id)
        out = [d for p in record.partitions for d in p.out]
        proven = prove.proven(self.settings, out, by_id, self.proofs) | rules.kept_in(record)
        for p in record.partitions:
            record = self.step(record, p.name, by_id, checks, proven) or record
        self.health = replace(
            self.health,
            partitions=tuple(rules.view_of(record, p) for p in record.partitions),
            checks=tuple(f.check for f in self.proofs.values() if f.check is not None),
            repairs=tuple(f.repair for f in self.proofs.values() if f.repair is not None),
            checking={d: f.checking for d, f in self.proofs.items() if f.checking is not None},
        )
        write_health(self.place.directory, self.health)
        self.keep(time.time())
        asked.done()  # a clear is kept on disk now: its request may go
        return record

    def keep(self, now: float) -> None:
        """The kept device health: the monitor's, with each device's checks and repairs."""
        if self.monitor is None:
            return
        write_atomic(
            self.place.directory / KEPT_FILE, dump_kept(with_proofs(self.monitor.kept(), self.proofs, now), now)
        )

    def prove_devices(self, record: HostRecord, health: Mapping[str, DeviceHealth]) -> None:
        """Repair and check the devices out of service that no raylet serves, as due."""
        if self.plugin is None or self.monitor is None:
            return
        for device in rules.free_devices(record):
            found = health.get(device)
            if prove.repair_due(self.settings, found, self.proofs.get(device)):
                self.repair(device)
            elif prove.check_due(self.settings, found, self.proofs.get(device), time.time()):
                self.check(device)

    def check(self, device: str) -> None:
        """One check of `device`, kept before it runs (so a decider killed
        mid-check checks again) and after."""
        assert self.plugin is not None
        started = time.time()
        proof = replace(self.proofs.get(device, Proof()), checking=started)
        self.proofs[device] = proof
        self.keep(started)
        steps.announce(steps.CHECK, f"checking {device} (within {self.settings.check_timeout_s:g}s)", say)
        try:
            found = self.plugin.check(device, self.settings.check_timeout_s)
        except Exception as e:  # a check that cannot run is a failed check, named; never the decider's end
            found = CheckResult(device, CheckOutcome.FAILED, short(f"{type(e).__name__}: {e}"), started, time.time())
        if isinstance(found, NotSupported):
            why = f"backend {type(self.plugin).__name__} has no check: nothing was checked"
            found = CheckResult(device, CheckOutcome.UNAVAILABLE, why, started, max(started, time.time()))
        say(f"check {device}: {found.outcome.value}: {found.detail}")
        self.proofs[device] = replace(proof, check=found, checking=None)
        self.health = replace(self.health, check_counts=counted(self.health.check_counts, device, found.outcome.value))
        self.keep(time.time())

    def repair(self, device: str) -> None:
        """One repair of `device`, kept as begun before it runs (so a decider
        killed mid-repair never repairs the same fault again) and after."""
        assert self.plugin is not None
        started = time.time()
        begun = RepairResult(
            device_id=device,
            outcome=RepairOutcome.FAILED,
            detail="begun; the decider ended before it did",
            action="repair",
            started=started,
            ended=started,
        )
        self.proofs[device] = replace(self.proofs.get(device, Proof()), repair=begun)
        self.keep(started)
        steps.announce(steps.REPAIR, f"repairing {device}", say)
        try:
            found = self.plugin.repair(device)
        except Exception as e:  # named, never the decider's end
            found = replace(begun, detail=short(f"{type(e).__name__}: {e}"), ended=time.time())
        if isinstance(found, NotSupported):
            found = replace(
                begun,
                outcome=RepairOutcome.OPERATOR,
                detail="the backend has no repair: the repair is the operator's",
                ended=max(started, time.time()),
            )
        say(f"repair {device}: {found.outcome.value}: {found.detail}")
        self.proofs[device] = replace(self.proofs[device], repair=found)
        self.health = replace(
            self.health, repair_counts=counted(self.health.repair_counts, device, found.outcome.value)
        )
        self.keep(time.time())

    def step(
        self,
        record: HostRecord,
        name: str,
        by_id: Mapping[str, DeviceHealth],
        checks: Mapping[RayProcess, procs.Check],
        proven: frozenset[str],
    ) -> HostRecord | None:
        """Partition `name`'s step: its effect on Ray, then its new state in
        the record (a failed effect leaves it as it was: tried again next poll)."""
        p = actions.entry(record, name)
        if record.in_change(name):  # a host change under way owns it until it ends
            return None
        raylet = p.raylet()
        alive = raylet is not None and raylet in checks and checks[raylet].ours
        facts = rules.Facts(full=p.device_ids, raylet_alive=alive, health=by_id, proven=proven)
        view = rules.view_of(record, p)
        step = rules.decide(self.settings, view, facts, time.time())
        held = step.view.held
        if step.effect is not rules.Effect.NONE:
            say(f"{name}: {step.effect.value} ({view.state.value} -> {step.view.state.value}) {step.message}".rstrip())
        try:
            if step.effect is rules.Effect.DRAIN:
                if p.node_id is None:
                    raise RayAccelError(f"partition {name} has no node id to drain")
                # Saved before Ray is asked: a decider killed in between asks again when it starts (`drained`).
                saved = actions.save_state(self.host, name, held)
                steps.announce(steps.DRAIN, f"draining node {p.node_id[:12]} of {name}", say, name)
                try:
                    drain(saved, p.node_id, step.message, step.view.deadline)
                except RayAccelError:
                    actions.save_state(self.host, name, record.state_of(p))  # not drained: tried again next poll
                    raise
                self.drained.add(name)
                return saved
            if alive and p.held and name not in self.drained and p.node_id is not None and view.deadline:
                # Held by a decider before this one, which may have died before asking Ray: asked again
                # (a draining raylet keeps the first request).
                drain(record, p.node_id, p.health.detail or f"ray-accel: partition {name} is drained", view.deadline)
                self.drained.add(name)
            if step.effect is not rules.Effect.NONE:
                level = host_level_partition(record)
                if step.effect is rules.Effect.STOP:
                    record = actions.stop_partition(self.host, name, held, say)
                else:
                    record = actions.restart_partition(self.host, name, step.view.devices, held, say)
                # Its exporter, and the host's values where they move to or from it.
                moved = host_level_partition(record)
                again = [name] if step.effect is rules.Effect.RESTART else []
                actions.redeploy_exporters(
                    record, again + [n for n in (level, moved) if n and n != name and moved != level], say
                )
                return record
            # A drain or a new detail changes the record's state alone.
            return None if held == record.state_of(p) else actions.save_state(self.host, name, held)
        except actions.Busy as e:
            say(f"{name}: {e}; trying again next poll")
        except RayAccelError as e:
            say(f"{name}: {step.effect.value} failed: {e}")
            self.health = replace(self.health, errors=(*self.health.errors, f"{name}: {e}"))
        return None


def build(place: state.Place, created: float) -> Decider:
    record = state.load(place)
    if record is None or record.created != created:
        raise RayAccelError(f"no host record of this start in {place.file}")
    settings = record.health or HealthSettings()
    plugin = process_backend()  # the one its spec names: started with it in its environment
    why = "no backend" if plugin is None else plugin.probe()
    devices = plugin.list_devices() if plugin is not None and why is None else ()
    monitor = plugin.health if plugin is not None and why is None else None
    if why is not None:
        say(f"warning: backend {record.spec.backend} is not usable here ({why}): every device is unknown")
    elif monitor is None:
        say(f"backend {record.spec.backend} has no health monitor: every device is unknown")
    now = time.time()
    kept = read_kept(place.directory)
    if kept.unknown:
        say(f"warning: {kept.unknown}: the devices the record has out of service stay out")
    if monitor is not None:
        monitor.resume(doubted(kept, (d for p in record.partitions for d in p.out), now))
    parts = tuple(rules.view_of(record, p) for p in record.partitions)
    health = HostHealth(at=now, settings=settings, devices=(), partitions=parts)
    pending = (kept.unknown,) if kept.unknown and kept.found else ()
    proofs = {k.device_id: Proof(k.check, k.checking, k.repair) for k in kept.devices}
    for device, proof in proofs.items():
        if proof.checking is not None:
            begun = time.strftime("%H:%M:%S", time.localtime(proof.checking))
            say(f"{device}: a check begun at {begun} never ended: checked again")
    usable = plugin if why is None else None
    return Decider(
        place=place,
        created=created,
        settings=settings,
        devices=tuple(devices),
        monitor=monitor,
        health=health,
        pending=pending,
        plugin=usable,
        proofs=proofs,
    )


def with_proofs(kept: Sequence[KeptDevice], proofs: Mapping[str, Proof], now: float) -> tuple[KeptDevice, ...]:
    """`kept` with each device's checks and repairs (a device the monitor keeps nothing of, added)."""
    merged = [
        replace(k, check=p.check, checking=p.checking, repair=p.repair) if (p := proofs.get(k.device_id)) else k
        for k in kept
    ]
    known = {k.device_id for k in kept}
    extra = [
        KeptDevice(device_id=d, since=now, check=p.check, checking=p.checking, repair=p.repair)
        for d, p in proofs.items()
        if d not in known
    ]
    return (*merged, *extra)


def counted(counts: Mapping[str, Mapping[str, int]], device: str, outcome: str) -> dict[str, dict[str, int]]:
    """`counts` (device -> outcome -> count) with one more `outcome` of `device`."""
    out = {d: dict(row) for d, row in counts.items()}
    row = out.setdefault(device, {})
    row[outcome] = row.get(outcome, 0) + 1
    return out


def run(place: state.Place, created: float) -> int:
    decider = build(place, created)
    say(
        f"deciding for {', '.join(p.partition for p in decider.health.partitions)}: "
        f"--on-unhealthy {decider.settings.action.value}, every {decider.settings.interval_s:g}s"
    )
    while True:
        started = time.monotonic()
        if decider.poll() is None:
            say("the host record is gone, being stopped or another start's: exiting")
            return 0
        time.sleep(max(0.0, decider.settings.interval_s - (time.monotonic() - started)))


def main(argv: Sequence[str] | None = None) -> int:
    inputs = helpers.read_inputs(helpers.HelperInputs, argv, "ray_accel.health.decider")
    try:
        with interruptible():
            return run(inputs.place, inputs.created)
    except KeyboardInterrupt as e:
        say(f"{e or 'interrupted'}: exiting")
        return 0


if __name__ == "__main__":
    sys.exit(main())
