"""Export per-partition samples into Ray's own metrics (`ray.util.metrics`).

One `PartitionExporter` actor per partition raylet, named and pinned by the
raylet's node id (`exporter-<node id>`): partition names repeat on every
host, node ids do not, so host B's `start` never replaces host A's exporters.
It samples only its partition's devices, the process trees of its raylet's
workers and the processes that hold its devices without being its workers
(orphans), and sets Ray gauges; the raylet's metrics agent serves them on
Ray's Prometheus endpoint next to Ray's own. Every series carries `host`,
the host's key (`<name>_<node IP>`, the value of its raylets' host label:
`ray_accel.core.hosts`), so `partition="p0"` is never ambiguous, and two
hosts that share a name are two hosts. Host-level values come from one partition per host, so a host is
counted once (Ray's dashboard reports every GPU from every raylet of a host).
`ray-accel top` and `status` read the same snapshots back from the actors.
A Ray Serve replica among the workers is named by its app, deployment and
replica id (`metrics.replicas`): the id from Ray's actor table, read only
when a replica process the exporter has not identified appears; its
processes are in the workload gauges as any worker's.

Names: Ray 2.60's recorder registers every `ray.util.metrics` gauge as
`ray_<name>` (`NAMESPACE = "ray"` in
ray/_private/telemetry/open_telemetry_metric_recorder.py), so a gauge named
`accel_device_utilization` is served as `ray_accel_device_utilization`.
`accel_device_healthy` is the device's family rule's verdict, as the host's
decider last wrote it (1 healthy, 0 unhealthy): a device whose health is
unknown (no decider, no health source, or the source failed) sets no value
at all, never 0, which would page someone. Power and temperature are set only where the backend
reports them (None sets nothing). A gauge value is kept for twice Ray's report interval
(`metrics_report_interval_ms`, 10 s by default) after it was last set, then
dropped: a workload or orphan that ended disappears on its own.

Health, from the host's decider (`<state dir>/health.json`, read on every
sample as the untrusted file it is): the exporter that exports the host's
host-level values also sets, for every partition and device of the host,
`accel_partition_state` (1 for the partition's state, 0 for the others),
`accel_device_health_state` (1 for the device's state: healthy, unhealthy,
unknown) and `accel_device_health_events` (the events seen per device, kind
and code since the decider started: an event that does not take the device
out of service only counts here), `accel_device_checks_total` and
`accel_device_repairs_total` (per outcome); and for each device out of
service, which no exporter samples, `accel_device_healthy` (its verdict,
so a device that left its partition still reads 0). Each exporter's snapshot carries its own
partition's state for `top`. Before each sample the backend's telemetry gets
the decider's host-wide readings (`plugins.host_readings`): a source process
the decider owns is never started again per exporter.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from ray_accel.core import reader
from ray_accel.core.checks import CheckOutcome, CheckResult, RepairOutcome, RepairResult
from ray_accel.core.health import Health
from ray_accel.core.health_state import HostHealth, PartState, read_health
from ray_accel.core.hosts import HostId, this_host_name
from ray_accel.core.processes import ProcessTable
from ray_accel.metrics.collect import DeviceReading, Snapshot, Where, collect, device_readings, with_replicas
from ray_accel.metrics.replicas import ReplicaIds

# The exporters' names and a reader's connection live with the readers (`top`, `status`).
from ray_accel.metrics.snapshots import NAMESPACE, actor_name, connect
from ray_accel.plugins.discovery import process_backend
from ray_accel.plugins.host_readings import read_readings
from ray_accel.rayapi.serve import live_actors

log = logging.getLogger(__name__)

INTERVAL_ENV = "RAYACCEL_METRICS_INTERVAL_S"
DEVICE_TAGS = ("host", "partition", "device_id", "family", "accelerator_type")
WORKLOAD_TAGS = ("host", "partition", "workload")
HOST_TAGS = ("host", "family", "accelerator_type")
ORPHAN_TAGS = ("host", "partition", "device_id", "pid", "command")
PARTITION_STATE_TAGS = ("host", "partition", "state")
DEVICE_STATE_TAGS = ("host", "partition", "device_id", "state")
EVENT_TAGS = ("host", "partition", "device_id", "kind", "code")
OUTCOME_TAGS = ("host", "partition", "device_id", "outcome")
# The device gauges a reading sets where it has the value, in `gauge_values`' order.
DEVICE_VALUES = ("util", "used", "total", "power", "temp")
STALE_S = 30.0  # a snapshot older than this (and three intervals) says so: its sampling is stuck
COMMAND_MAX = 200  # an orphan's command line is a label value: keep it bounded


@dataclass(frozen=True)
class GaugeSpec:
    name: str  # as given to ray.util.metrics; Ray's recorder serves it with `ray_` before it
    description: str
    tags: tuple[str, ...]


GAUGES: Mapping[str, GaugeSpec] = {
    "util": GaugeSpec("accel_device_utilization", "Device utilisation, 0..1", DEVICE_TAGS),
    "used": GaugeSpec("accel_device_memory_used_bytes", "Device memory in use", DEVICE_TAGS),
    "total": GaugeSpec("accel_device_memory_total_bytes", "Device memory", DEVICE_TAGS),
    "healthy": GaugeSpec(
        "accel_device_healthy", "1 healthy, 0 unhealthy, by its family's rule; no value while unknown", DEVICE_TAGS
    ),
    "power": GaugeSpec("accel_device_power_watts", "Device power draw, watts", DEVICE_TAGS),
    "temp": GaugeSpec("accel_device_temperature_celsius", "Device temperature, degrees Celsius", DEVICE_TAGS),
    "orphan": GaugeSpec(
        "accel_device_orphan_processes",
        "1 for each process holding the device that is not a worker of the raylet owning it",
        ORPHAN_TAGS,
    ),
    "w_rss": GaugeSpec("accel_workload_rss_bytes", "Host memory of a Ray worker's process tree", WORKLOAD_TAGS),
    "w_cpu": GaugeSpec("accel_workload_cpu_seconds", "CPU time of a Ray worker's process tree", WORKLOAD_TAGS),
    "w_dev": GaugeSpec(
        "accel_workload_device_memory_bytes",
        "Device memory held by a Ray worker's process tree",
        (*WORKLOAD_TAGS, "device_id"),
    ),
    "n_devices": GaugeSpec("accel_host_devices", "Accelerator devices on the host", HOST_TAGS),
    "n_mem": GaugeSpec("accel_host_memory_used_bytes", "Host memory in use", HOST_TAGS),
    "p_state": GaugeSpec(
        "accel_partition_state",
        "1 for the partition's state (serving, draining, shrunk, restoring, stopped), 0 for the others",
        PARTITION_STATE_TAGS,
    ),
    "d_state": GaugeSpec(
        "accel_device_health_state",
        "1 for the device's health (healthy, unhealthy, unknown) by its family's rule, 0 for the others",
        DEVICE_STATE_TAGS,
    ),
    "events": GaugeSpec(
        "accel_device_health_events",
        "Health events seen per device, kind and code since the host's decider started (only grows)",
        EVENT_TAGS,
    ),
    "checks": GaugeSpec(
        "accel_device_checks_total",
        "Active checks of a device out of service, per outcome, since the host's decider started (only grows)",
        OUTCOME_TAGS,
    ),
    "repairs": GaugeSpec(
        "accel_device_repairs_total",
        "Repairs of a device out of service, per outcome, since the host's decider started (only grows)",
        OUTCOME_TAGS,
    ),
}


@dataclass(frozen=True)
class HostValues:
    host: str
    family: str
    accelerator_type: str
    devices: int
    memory_used_bytes: int


def gauge_values(
    snap: Snapshot, host: HostValues | None, health: HostHealth | None
) -> list[tuple[str, float, dict[str, str]]]:
    """(gauge key, value, tags) for everything a snapshot sets, each device's
    health by its rule in `health` (the host's decider's): pure, so the
    names and labels Prometheus will see are testable without Ray."""
    out: list[tuple[str, float, dict[str, str]]] = []
    verdict = {d.device_id: d.state for d in health.devices} if health is not None else {}
    for d in snap.devices:
        tags = {
            "host": d.host,
            "partition": d.partition,
            "device_id": d.id,
            "family": d.family,
            "accelerator_type": d.accelerator_type or "",
        }
        read = (d.utilization, d.memory_used_bytes, d.memory_total_bytes, d.power_watts, d.temperature_c)
        out += [(key, float(v), tags) for key, v in zip(DEVICE_VALUES, read, strict=True) if v is not None]
        if (state := verdict.get(d.id)) in (Health.HEALTHY, Health.UNHEALTHY):
            out.append(("healthy", float(state is Health.HEALTHY), tags))
    for w in snap.workloads:
        wt = {"host": w.host, "partition": w.partition, "workload": w.workload}
        out += [("w_rss", float(w.rss_bytes), wt), ("w_cpu", w.cpu_seconds, wt)]
        for dev, nbytes in sorted(w.device_memory_bytes.items()):
            out.append(("w_dev", float(nbytes), {**wt, "device_id": dev}))
    for o in snap.orphans:
        orphan_tags = {
            "host": o.host,
            "partition": o.partition,
            "device_id": o.device_id,
            "pid": str(o.pid),
            "command": o.command[:COMMAND_MAX],
        }
        out.append(("orphan", 1.0, orphan_tags))
    if host is not None:
        ht = {"host": host.host, "family": host.family, "accelerator_type": host.accelerator_type}
        out += [("n_devices", float(host.devices), ht), ("n_mem", float(host.memory_used_bytes), ht)]
    return out


def health_values(health: HostHealth, host: str) -> list[tuple[str, float, dict[str, str]]]:
    """(gauge key, value, tags) for a host's health state: pure, as `gauge_values`."""
    out = [
        ("p_state", float(p.state is st), {"host": host, "partition": p.partition, "state": st.value})
        for p in health.partitions
        for st in PartState
    ]
    # A device's partition is the one it was planned in, in service or out.
    owner = {d: p.partition for p in health.partitions for d in (*p.devices, *p.out)}
    for d in health.devices:
        tags = {"host": host, "partition": owner.get(d.device_id, ""), "device_id": d.device_id}
        out += [("d_state", float(d.state is h), {**tags, "state": h.value}) for h in Health]
    for device, counts in sorted(health.counters.items()):
        for key, n in sorted(counts.items()):
            kind, _, code = key.partition(":")
            tags = {"host": host, "partition": owner.get(device, ""), "device_id": device}
            out.append(("events", float(n), {**tags, "kind": kind, "code": code}))
    # Every device and outcome from the start, 0 until one happens: Prometheus's instrumentation
    # practice "Avoid missing metrics" (prometheus.io/docs/practices/instrumentation), so a rate or
    # a panel over them has data before the first check, and an outcome never seen reads 0.
    kinds = (
        ("checks", health.check_counts, [o.value for o in CheckOutcome]),
        ("repairs", health.repair_counts, [o.value for o in RepairOutcome]),
    )
    for key, table, outcomes in kinds:
        devices = sorted({d.device_id for d in health.devices} | set(table))
        for device in devices:
            counts = table.get(device, {})
            for outcome in sorted({*outcomes, *counts}):
                tags = {"host": host, "partition": owner.get(device, ""), "device_id": device, "outcome": outcome}
                out.append((key, float(counts.get(outcome, 0)), tags))
    return out


def out_of_service(health: HostHealth) -> dict[str, str]:
    """Each device out of service that no raylet serves -> the partition it was planned in."""
    return {d: p.partition for p in health.partitions for d in p.out if d not in p.devices}


def out_values(health: HostHealth, host: HostValues) -> list[tuple[str, float, dict[str, str]]]:
    """`accel_device_healthy` of each device out of service (no exporter samples it):
    its rule's verdict, from the host-level exporter, as the host's other values."""
    owner = out_of_service(health)
    out = []
    for d in health.devices:
        if d.device_id in owner and d.state in (Health.HEALTHY, Health.UNHEALTHY):
            tags = {
                "host": host.host,
                "partition": owner[d.device_id],
                "device_id": d.device_id,
                "family": host.family,
                "accelerator_type": host.accelerator_type,
            }
            out.append(("healthy", float(d.state is Health.HEALTHY), tags))
    return out


@dataclass(frozen=True, kw_only=True)
class OutDevice:
    """A device out of service as `top` lists it: its health, last check and repair."""

    id: str
    host: str
    partition: str
    health_state: str
    reason: str
    check: CheckResult | None
    checking: float | None
    repair: RepairResult | None


def out_devices(health: HostHealth, host: str) -> list[OutDevice]:
    """`top`'s rows of the devices out of service, which no exporter samples."""
    owner = out_of_service(health)
    checks = {c.device_id: c for c in health.checks}
    repairs = {r.device_id: r for r in health.repairs}
    return [
        OutDevice(
            id=d.device_id,
            host=host,
            partition=owner[d.device_id],
            health_state=d.state.value,
            reason=d.last_event.reason if d.last_event is not None else d.healthy_again,
            check=checks.get(d.device_id),
            checking=health.checking.get(d.device_id),
            repair=repairs.get(d.device_id),
        )
        for d in health.devices
        if d.device_id in owner
    ]


def partition_health(health: HostHealth | None, partition: str) -> dict[str, Any] | None:
    """One partition's health for its exporter's snapshot (`top`'s JSON): its
    state, since when, why, and its devices' states."""
    if health is None or (p := health.partition(partition)) is None:
        return None
    mine = (*p.devices, *p.out)
    return reader.dump_fields(p, devices={d.device_id: d.state.value for d in health.devices if d.device_id in mine})


def leaves(health: HostHealth | None, node_id: str) -> bool:
    """Whether the exporter on raylet `node_id` leaves it: the decider drains it."""
    return any(p.node_id == node_id and not p.state.exporting for p in health.partitions) if health else False


def host_level_of(health: HostHealth) -> str | None:
    """The partition whose exporter exports the host-level values: the first whose exporter runs."""
    return next((p.partition for p in health.partitions if p.state.exporting), None)


def adopted(health: HostHealth) -> dict[str, tuple[str, ...]]:
    """Partition -> the devices its raylet serves, for each raylet without an exporter."""
    return {p.partition: p.devices for p in health.partitions if p.devices and not p.state.exporting}


@dataclass(frozen=True)
class ExporterEntry:
    """What an exporter is told of its partition: its raylet and the devices it serves."""

    partition: str
    node_id: str
    device_ids: tuple[str, ...]


class PartitionExporter:
    def __init__(self, entry: ExporterEntry, host_level: bool, interval_s: float, state_dir: str | None) -> None:
        import ray
        from ray.util.metrics import Gauge

        here = ray.get_runtime_context().get_node_id()
        if here != entry.node_id:
            raise RuntimeError(f"exporter of {entry.partition} ({entry.node_id}) was placed on node {here}")
        # The raylet's own backend, by the name its bridge spec gives: no
        # discovery here. Sampling needs the hardware found, by that backend only.
        plugin = process_backend()
        why = "no accelerator backend" if plugin is None else plugin.probe()
        if plugin is None or why is not None:
            raise RuntimeError(f"the metrics exporter's backend is not usable here: {why}")
        self.plugin, self.telemetry = plugin, plugin.telemetry
        self.host_devices = plugin.list_devices()
        self.devices = [d for d in self.host_devices if d.id in entry.device_ids]
        self.accelerator_type = plugin.host_info().accelerator_type
        self.host_level, self.interval_s = host_level, interval_s
        self.state_dir = Path(state_dir) if state_dir else None
        self.raylet_pid = os.getppid()
        self.table = ProcessTable()  # kept between samples: each reads again only what may have changed
        self.where = Where(HostId(this_host_name(), ray.util.get_node_ip_address()).key, entry.node_id, entry.partition)
        self.g = {key: Gauge(s.name, s.description, s.tags) for key, s in GAUGES.items()}
        # Serve replicas' ids, from Ray's actor table once per new replica process.
        self.replicas = ReplicaIds(entry.node_id, live_actors)
        self._last: Snapshot | None = None
        self._health: tuple[HostHealth | None, str | None] = (None, None)
        self._adopted: tuple[DeviceReading, ...] | None = None  # the host-level exporter's: see `snapshot`
        self._failed: str | None = None  # why the last sample failed: the snapshot shown is older
        self._lock = threading.Lock()
        self.sample()
        threading.Thread(target=self._loop, daemon=True, name="ray-accel-metrics").start()

    def _loop(self) -> None:
        import ray

        while not leaves(self._health[0], self.where.node_id):
            time.sleep(self.interval_s)
            self.resample()
        log.info("partition %s is drained: its exporter leaves its raylet", self.where.partition)
        ray.get_runtime_context().current_actor.leave.remote()

    def resample(self) -> None:
        """`sample`; if it fails, the snapshot says so (the one shown is older)
        and the next one reads `/proc` afresh."""
        try:
            self.sample()
        except Exception as e:
            log.exception("ray-accel metrics sample failed")
            # A table left half-updated by the failure would fail every later read: start it again.
            self.table = ProcessTable()
            with self._lock:
                self._failed = f"sample failed: {type(e).__name__}: {e}"

    def leave(self) -> None:
        """Exit, so the drained raylet can end once its work has moved."""
        import ray

        ray.actor.exit_actor()

    def _host_values(self, host_level: bool) -> HostValues | None:
        if not host_level:
            return None
        info = self.plugin.host_info()
        return HostValues(
            self.where.host, info.family, info.accelerator_type or "", info.device_count, psutil.virtual_memory().used
        )

    def _read_health(self) -> tuple[HostHealth | None, str | None]:
        """The host's health file, or why there is none to read."""
        if self.state_dir is None:
            return None, None
        try:
            return read_health(self.state_dir), None
        except Exception as e:  # the file is input: a bad one is reported, never fatal here
            return None, f"health: {e}"

    def sample(self) -> None:
        if self.telemetry is not None:  # the host-wide sources the decider owns, never one per exporter
            self.telemetry.use_host_readings(*read_readings(self.state_dir, time.time()))
        table = self.table.read(self.raylet_pid)
        snap = collect(
            self.telemetry, self.devices, self.accelerator_type, self.raylet_pid, (os.getpid(),), table, self.where
        )
        started = time.perf_counter()
        named, lookup_errors = self.replicas.identify(
            {w.pid: w.serve for w in snap.workloads if w.serve is not None}, time.monotonic()
        )
        if named or lookup_errors:
            snap = with_replicas(snap, named, lookup_errors)
            snap = replace(snap, took_s=snap.took_s + time.perf_counter() - started)  # the lookup is part of the sample
        health, problem = self._read_health()
        level = self.host_level if health is None else host_level_of(health) == self.where.partition
        values = gauge_values(snap, self._host_values(level), health)
        others: tuple[DeviceReading, ...] | None = None
        if level and health is not None:
            # One sampling of the devices served by raylets without an exporter, each tagged with its partition.
            owner = {d: name for name, ids in adopted(health).items() for d in ids}
            devices = [d for d in self.host_devices if d.id in owner]
            found, _ = device_readings(self.telemetry, devices, "", self.accelerator_type, self.where.host)
            others = tuple(r._replace(partition=owner[r.id]) for r in found)
            values += health_values(health, self.where.host)
            host_values = self._host_values(level)
            if host_values is not None:
                values += out_values(health, host_values)
            values += gauge_values(replace(snap, devices=others, workloads=(), orphans=()), None, health)
        for key, value, tags in values:
            self.g[key].set(value, tags)
        with self._lock:
            self._last, self._health, self._adopted, self._failed = snap, (health, problem), others, None

    def snapshot(self) -> dict[str, Any]:
        """The latest snapshot as `top` and `status` print it (JSON)."""
        with self._lock:
            if self._last is None:
                return {}
            health, problem = self._health
            out: dict[str, Any] = {**self._last.to_json(), "health": partition_health(health, self.where.partition)}
            if health is not None and self._adopted is not None:
                # The partitions whose exporter is gone (drained, stopped): their state and devices, from here.
                gone = [p.partition for p in health.partitions if not p.state.exporting]
                out["others"] = {name: partition_health(health, name) for name in gone}
                out["devices"] += [d._asdict() for d in self._adopted]
                out["out_of_service"] = [reader.dump(o) for o in out_devices(health, self.where.host)]
            if self._failed is not None:
                out["errors"] = [*out["errors"], f"{self._failed} (this snapshot is from the last good sample)"]
            elif (age := time.time() - self._last.taken_at) > max(STALE_S, 3 * self.interval_s):
                # A sample that hangs (a read of /proc blocked on its process) raises nothing.
                out["errors"] = [*out["errors"], f"no sample for {age:.0f}s: this snapshot is from the last one"]
            return out if problem is None else {**out, "health_error": problem}


@dataclass(frozen=True)
class Deployment:
    """Exporters to start (or restart) on the cluster at `address`, one per
    entry's raylet. Until the host's `health.json` says otherwise
    (`host_level_of`), the exporter of `host_level` (default: the first
    entry's) also exports the host-level values: name the host's when
    restarting only some, or a host would be counted twice."""

    address: str
    entries: tuple[ExporterEntry, ...]
    host_level: str | None = None
    state_dir: str | None = None  # the host's, where its health.json is


def deploy(d: Deployment, interval_s: float | None = None) -> list[str]:
    """Start (or restart) the exporters `d` names; their names."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    interval = interval_s or float(os.environ.get(INTERVAL_ENV, "5"))
    host_level = d.host_level or (d.entries[0].partition if d.entries else None)
    remote_cls = ray.remote(num_cpus=0, max_restarts=0)(PartitionExporter)
    connect(d.address)
    detached = {"namespace": NAMESPACE, "lifetime": "detached"}
    try:
        handles = []
        for e in d.entries:
            kill(e.node_id)
            # The raylet itself, not a label: labels repeat on every host.
            on = NodeAffinitySchedulingStrategy(e.node_id, soft=False)
            actor = remote_cls.options(name=actor_name(e.node_id), scheduling_strategy=on, **detached)
            handles.append(actor.remote(e, e.partition == host_level, interval, d.state_dir))
        ray.get([h.snapshot.remote() for h in handles], timeout=120)
        return [actor_name(e.node_id) for e in d.entries]
    finally:
        ray.shutdown()


def kill(node_id: str) -> None:
    """End the exporter of raylet `node_id`, where one runs (connected driver)."""
    import ray

    try:
        ray.kill(ray.get_actor(actor_name(node_id), namespace=NAMESPACE))
    except ValueError:
        pass  # none runs there
