"""Samples at four levels: host, partition, workload, process; and the
processes that hold a partition's devices without being its workers (orphans).

Collection is one function per level over a backend's telemetry and `/proc`;
a source that fails or a device that vanished is reported in the reading,
never raised, so one bad device or sensor does not stop the rest. Every
reading carries its host: partition names (p0, p1, ...) repeat on every host.
Export to Ray's metrics lives in `ray_accel.metrics.export`.

Cost: finding the raylet's tree needs every process's parent, so the
caller's `ProcessTable` lists `/proc`; kept from one collection to the next
(as an exporter keeps it), it lists it again only once a task began or ended,
and reads `/proc/<pid>/stat` again only for the raylet's tree and for
processes that began or whose parent ended since. A child of the raylet is
told a worker by the comm in its stat line, and each line of the tree is
parsed by the table, only when it changed. It reads `cmdline` once for
each child of the raylet whose name the kernel cut short (its title names
the workload; a short title is whole in the stat line) and once per orphan,
and asks the backend three times (device samples, holders, process memory).
A backend's per-process memory is read only: a mapping that names only this
partition's devices is shared, not copied. A source that fails is in the
snapshot's `errors`, and logged when it starts failing.
`benchmarks/bench_metrics.py` compares it with the floor.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import NamedTuple

from ray_accel.core.devices import Device
from ray_accel.core.processes import (
    CLOCK_TICKS,
    ProcessTable,
    descendants,
    read_small,
)
from ray_accel.core.reader import dump_fields
from ray_accel.metrics.replicas import ReplicaFields, ServeReplica, from_title, replica_fields
from ray_accel.plugins.interface import Telemetry
from ray_accel.rayapi.serve import REPLICA_TITLE_PREFIX

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Where:
    """What every reading of one collection is tagged with."""

    host: str
    node_id: str
    partition: str


class DeviceReading(NamedTuple):
    """One device (a tuple: a frozen dataclass's __init__ costs several times
    more, once per device per collection)."""

    id: str
    host: str
    partition: str
    family: str
    accelerator_type: str | None
    utilization: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    recent_events: int | None  # the sample's count (`DeviceSample.recent_events`); health is the rule's
    reason: str | None = None  # why the device has no sample
    power_watts: float | None = None
    temperature_c: float | None = None


_new_tuple = tuple.__new__


class ProcessReading(NamedTuple):
    """One process of a workload (a tuple: a collection makes one per process)."""

    pid: int
    name: str
    cpu_seconds: float
    rss_bytes: int
    # Read only: the processes of a collection that hold the same share one.
    device_memory_bytes: Mapping[str, int]


# What a process that holds no device reads as (read only, shared).
_NONE: Mapping[str, int] = MappingProxyType({})


class WorkloadJson(ReplicaFields):
    """A workload as a snapshot and `top --json` write it (`WorkloadReading.to_json`)."""

    workload: str
    host: str
    partition: str
    pid: int
    pids: list[int]
    cpu_seconds: float
    rss_bytes: int
    device_memory_bytes: dict[str, int]


class WorkloadReading(NamedTuple):
    """One Ray worker's whole process tree (a tuple, as `ProcessReading`: a
    frozen dataclass's __init__ costs several times more, once per worker)."""

    workload: str  # the Ray worker's process title and pid
    host: str
    partition: str
    pid: int
    processes: tuple[ProcessReading, ...]
    # The Serve replica it is (`metrics.replicas`), None for any other worker.
    serve: ServeReplica | None = None

    @property
    def rss_bytes(self) -> int:
        return sum(p.rss_bytes for p in self.processes)

    @property
    def cpu_seconds(self) -> float:
        return sum(p.cpu_seconds for p in self.processes)

    @property
    def device_memory_bytes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.processes:
            for k, v in p.device_memory_bytes.items():
                out[k] = out.get(k, 0) + v
        return out

    def to_json(self) -> WorkloadJson:
        serve = replica_fields(self.serve)
        return WorkloadJson(
            workload=self.workload,
            host=self.host,
            partition=self.partition,
            pid=self.pid,
            pids=[p.pid for p in self.processes],
            cpu_seconds=self.cpu_seconds,
            rss_bytes=self.rss_bytes,
            device_memory_bytes=self.device_memory_bytes,
            kind=serve["kind"],
            app=serve["app"],
            deployment=serve["deployment"],
            replica_id=serve["replica_id"],
            unknown=serve["unknown"],
        )


@dataclass(frozen=True)
class OrphanReading:
    """A process that holds one of the partition's devices and is not in its raylet's process tree."""

    device_id: str
    host: str
    partition: str
    pid: int
    command: str


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    host: str
    node_id: str
    partition: str
    taken_at: float
    took_s: float
    devices: tuple[DeviceReading, ...]
    workloads: tuple[WorkloadReading, ...]
    orphans: tuple[OrphanReading, ...]
    errors: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        # The readings are tuples (see `WorkloadReading`): each written as an object.
        devices = [d._asdict() for d in self.devices]
        workloads = [w.to_json() for w in self.workloads]
        return dump_fields(self, devices=devices, workloads=workloads)


def with_replicas(snap: Snapshot, found: Mapping[int, ServeReplica], errors: Sequence[str] = ()) -> Snapshot:
    """`snap` with the workloads of `found` (by root PID) named by it
    (`metrics.replicas.ReplicaIds`), and `errors` added."""
    workloads = tuple(w._replace(serve=found[w.pid]) if w.pid in found else w for w in snap.workloads)
    return replace(snap, workloads=workloads, errors=(*snap.errors, *errors))


def device_readings(
    telemetry: Telemetry | None,
    devices: Sequence[Device],
    partition: str,
    accelerator_type: str | None,
    host: str = "",
) -> tuple[list[DeviceReading], list[str]]:
    """This partition's devices only; each one exactly once, tagged with its
    own accelerator type where it has one (a host may hold several models)."""
    kind = {d.id: d.accelerator_type or accelerator_type for d in devices}

    def unknown(d: Device, reason: str) -> DeviceReading:
        return DeviceReading(
            id=d.id,
            host=host,
            partition=partition,
            family=d.family,
            accelerator_type=kind[d.id],
            utilization=None,
            memory_used_bytes=None,
            memory_total_bytes=d.memory_bytes,
            recent_events=None,
            reason=reason,
        )

    if telemetry is None:
        return [unknown(d, "this backend takes no device samples") for d in devices], []
    try:
        samples = {s.device_id: s for s in telemetry.device_samples()}
    except Exception as e:
        reason = f"metric source failed: {type(e).__name__}: {e}"
        return [unknown(d, reason) for d in devices], [reason]
    out: list[DeviceReading] = []
    errors: list[str] = []
    for d in devices:
        s = samples.get(d.id)
        if s is None:
            out.append(unknown(d, "device disappeared"))
            errors.append(f"device {d.id} disappeared")
            continue
        reading = (d.id, host, partition, d.family, kind[d.id], s.utilization, s.memory_used_bytes)
        rest = (s.memory_total_bytes, s.recent_events, None, s.power_watts, s.temperature_c)
        out.append(_new_tuple(DeviceReading, reading + rest))
    return out, errors


def cmdline(pid: int) -> str:
    """The process's command line as one string ('' if it is gone); Ray's
    workers retitle themselves here (`ray::TrainWorker.train`)."""
    raw = read_small(f"/proc/{pid}/cmdline")
    if raw is None:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


def workload_readings(
    telemetry: Telemetry | None, titles: Mapping[int, str], table: ProcessTable, mine: set[str], at: Where
) -> tuple[list[WorkloadReading], list[str]]:
    """One reading per Ray worker (`titles`: PID -> its title), over its whole
    process tree as `table` shows it, and what could not be read."""
    stats, kids = table.fields, table.children
    held: Mapping[int, Mapping[str, int]] = {}
    errors: list[str] = []
    if telemetry is not None and titles:
        try:
            # Every process the table read, the workers' trees among them: a backend looks up each of its holders.
            held = telemetry.process_device_memory(stats.keys())
        except Exception as e:
            errors.append(f"process device memory unknown: {type(e).__name__}: {e}")
    # This partition's share: the whole mapping (read only, shared) where it holds only this partition's devices.
    memory = {pid: h if h.keys() <= mine else {k: v for k, v in h.items() if k in mine} for pid, h in held.items() if h}
    ticks, out = CLOCK_TICKS, []
    for root, title in titles.items():
        # tuple.__new__: the NamedTuple's own __new__ is a Python call, per process.
        readings = [
            _new_tuple(ProcessReading, (pid, s.name, s.cpu_ticks / ticks, s.rss_bytes, memory.get(pid, _NONE)))
            for pid in (root, *descendants(root, kids))
            if (s := stats.get(pid)) is not None  # else it ended during the read, or its line is malformed
        ]
        if readings and readings[0][0] == root:
            name = title.partition(" ")[0] or readings[0][1]
            # A Serve replica is told by its title; its id is the exporter's to find (`metrics.replicas`).
            serve = from_title(title) if name.startswith(REPLICA_TITLE_PREFIX) else None
            reading = (f"{name}[{root}]", at.host, at.partition, root, tuple(readings), serve)
            out.append(_new_tuple(WorkloadReading, reading))
    return out, errors


def is_ray_worker(title: str) -> bool:
    """A Ray worker's title (`ray::IDLE`, `ray::Holder.where`), not one of Ray's agents."""
    first = title.split(" ")[0]
    return first.startswith("ray::") and "Agent" not in first


# The kernel keeps a process name (comm) of at most 15 characters. Ray's
# workers retitle themselves with setproctitle, which sets comm as well as
# argv (seen on Ray 2.60 workers: comm `ray::PartitionE`, argv
# `ray::PartitionExporter`), so a comm shorter than this is the whole title.
COMM_MAX = 15


def ray_workers(raylet_pid: int, exclude: Collection[int], table: ProcessTable) -> dict[int, str]:
    """The worker processes a raylet started (its `ray::` children, less Ray's
    own agents), with their titles: from the stat line's comm, read from
    `cmdline` only where comm may be cut short (Ray's agents,
    `ray::DashboardAgent`, are told apart only by the full title)."""
    out = {}
    # A comm shorter than COMM_MAX is the whole title, so its verdict holds
    # for every child that has it: most children share a few.
    whole: dict[str, bool] = {}  # comm -> a worker's?
    stats = table.fields
    for pid in table.children.get(raylet_pid, ()):
        s = stats.get(pid)  # None: it ended during the read
        if s is None or not (comm := s.name).startswith("ray::") or pid in exclude:
            continue
        if len(comm) >= COMM_MAX or not comm.isascii():  # non-ASCII: its length is not the kernel's, in bytes
            if is_ray_worker(title := cmdline(pid)):
                out[pid] = title
            continue
        if comm not in whole:
            whole[comm] = is_ray_worker(comm)
        if whole[comm]:
            out[pid] = comm
    return out


def orphan_pids(
    holders: Mapping[str, Iterable[int]], mine: Collection[str], workers: Collection[int]
) -> list[tuple[str, int]]:
    """(device, pid) for each holder of one of `mine` that is not one of
    `workers` (the raylet's worker processes; their trees the caller walks
    only for what is left), sorted, each once."""
    return sorted({(d, pid) for d, pids in holders.items() if d in mine for pid in pids if pid not in workers})


def orphan_readings(
    telemetry: Telemetry | None,
    mine: Collection[str],
    raylet_pid: int,
    workers: Collection[int],
    table: ProcessTable,
    at: Where,
) -> tuple[list[OrphanReading], list[str]]:
    """The holders of `mine` outside the raylet's whole process tree, which is
    walked only for a holder that is not one of its `workers`."""
    if telemetry is None:
        return [], []
    try:
        holders = telemetry.device_holders()
    except Exception as e:
        return [], [f"device holders unknown: {type(e).__name__}: {e}"]
    outside = orphan_pids(holders, mine, workers)
    if not outside:
        return [], []
    tree = {raylet_pid, *descendants(raylet_pid, table.children)}
    out = []
    for device, pid in outside:
        if pid in tree:
            continue
        stat = table.stat(pid)
        command = cmdline(pid) or (stat.name if stat is not None else "")
        if command:  # else it ended since the backend saw it
            out.append(OrphanReading(device, at.host, at.partition, pid, command))
    return out, []


def collect(
    telemetry: Telemetry | None,
    devices: Sequence[Device],
    accelerator_type: str | None,
    raylet_pid: int,
    exclude: Collection[int],
    table: ProcessTable,
    at: Where,
) -> Snapshot:
    """One collection: the devices, the raylet's workers (less `exclude`) as
    `table` shows them, and the holders of the devices outside its tree."""
    start = time.perf_counter()
    readings, errors = device_readings(telemetry, devices, at.partition, accelerator_type, at.host)
    mine = {d.id for d in devices}
    titles = ray_workers(raylet_pid, exclude, table)
    orphans, orphan_errors = orphan_readings(telemetry, mine, raylet_pid, titles, table, at)
    workloads, workload_errors = workload_readings(telemetry, titles, table, mine, at)
    errors += orphan_errors + workload_errors
    _log_new(at.partition, errors)
    return Snapshot(
        host=at.host,
        node_id=at.node_id,
        partition=at.partition,
        taken_at=time.time(),
        took_s=time.perf_counter() - start,
        devices=tuple(readings),
        workloads=tuple(workloads),
        orphans=tuple(orphans),
        errors=tuple(errors),
    )


# The errors last logged per partition: a source that keeps failing is logged
# when it starts to, not at every sample.
_logged: dict[str, frozenset[str]] = {}


def _log_new(partition: str, errors: Sequence[str]) -> None:
    now = frozenset(errors)
    for e in sorted(now - _logged.get(partition, frozenset())):
        log.warning("ray-accel metrics of partition %s: %s", partition, e)
    _logged[partition] = now
