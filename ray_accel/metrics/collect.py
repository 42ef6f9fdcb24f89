"""Samples at four levels: host, partition, workload, process; and the
processes that hold a partition's devices without being its workers (orphans).

Collection is one function per level over a backend's telemetry and `/proc`;
a source that fails or a device that vanished is reported in the reading,
never raised, so one bad device or sensor does not stop the rest. Every
reading carries its host: partition names (p0, p1, ...) repeat on every host.
Export to Ray's metrics lives in `ray_accel.metrics.export`.

Cost: one collection reads `/proc/<pid>/stat` once for every process of the
host (the only way to learn who is whose child) and parses each line's parent
only; the comm, CPU time, start time and RSS of a process of a worker's tree
are parsed once and serve its title, its reading and the liveness check of
its published mask. It reads `cmdline` once for each child of the raylet
whose name the kernel cut short (its title names the workload; a short title
is whole in the stat line) and once per orphan, and asks the backend twice
(device samples, then process memory and holders; the mock reads the mask
records, and works out what they hold, again only when their directory
changed, and checks every record's writer against the collection's table,
handed to it through `processes.table_in_use`). A backend's per-process
memory is read only, so processes that hold the same share one mapping, and
this partition's share of each is made once per collection. A source that
fails is in the snapshot's `errors`, and logged when it starts failing.
`benchmarks/bench_metrics.py` compares it with the floor.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

from ray_accel.core.devices import Device
from ray_accel.core.processes import (
    CLOCK_TICKS,
    ProcessTable,
    ProcStat,
    Usage,
    children_map,
    descendants,
    process_table,
    read_small,
    table_in_use,
)
from ray_accel.plugins.interface import Telemetry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeviceReading:
    id: str
    host: str
    partition: str
    family: str
    accelerator_type: str | None
    utilization: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    healthy: bool | None  # None: unknown, the source failed
    reason: str | None = None
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


class WorkloadReading(NamedTuple):
    """One Ray worker's whole process tree (a tuple, as `ProcessReading`: a
    frozen dataclass's __init__ costs several times more, once per worker)."""

    workload: str  # the Ray worker's process title and pid
    host: str
    partition: str
    pid: int
    processes: tuple[ProcessReading, ...]

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

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "host": self.host,
            "partition": self.partition,
            "pid": self.pid,
            "pids": [p.pid for p in self.processes],
            "cpu_seconds": self.cpu_seconds,
            "rss_bytes": self.rss_bytes,
            "device_memory_bytes": self.device_memory_bytes,
        }


@dataclass(frozen=True)
class OrphanReading:
    """A process that holds one of the partition's devices and is not in its raylet's process tree."""

    device_id: str
    host: str
    partition: str
    pid: int
    command: str


@dataclass(frozen=True)
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

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "node_id": self.node_id,
            "partition": self.partition,
            "taken_at": self.taken_at,
            "took_s": self.took_s,
            "devices": [asdict(d) for d in self.devices],
            "workloads": [w.to_json() for w in self.workloads],
            "orphans": [asdict(o) for o in self.orphans],
            "errors": list(self.errors),
        }


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

    def unknown(d: Device, healthy: bool | None, reason: str) -> DeviceReading:
        return DeviceReading(d.id, host, partition, d.family, kind[d.id], None, None, d.memory_bytes, healthy, reason)

    if telemetry is None:
        return [unknown(d, None, "this backend takes no device samples") for d in devices], []
    try:
        samples = {s.device_id: s for s in telemetry.device_samples()}
    except Exception as e:
        reason = f"metric source failed: {type(e).__name__}: {e}"
        return [unknown(d, None, reason) for d in devices], [reason]
    out = []
    errors = []
    for d in devices:
        s = samples.get(d.id)
        if s is None:
            out.append(unknown(d, False, "device disappeared"))
            errors.append(f"device {d.id} disappeared")
            continue
        out.append(
            DeviceReading(
                id=d.id,
                host=host,
                partition=partition,
                family=d.family,
                accelerator_type=kind[d.id],
                utilization=s.utilization,
                memory_used_bytes=s.memory_used_bytes,
                memory_total_bytes=s.memory_total_bytes,
                healthy=s.healthy,
                reason=s.health_reason,
                power_watts=s.power_watts,
                temperature_c=s.temperature_c,
            )
        )
    return out, errors


def cmdline(pid: int) -> str:
    """The process's command line as one string ('' if it is gone); Ray's
    workers retitle themselves here (`ray::TrainWorker.train`)."""
    raw = read_small(f"/proc/{pid}/cmdline")
    if raw is None:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


def worker_trees(
    roots: Iterable[int], kids: Mapping[int, Sequence[int]], table: Collection[int]
) -> dict[int, list[int]]:
    """Each root still in `table` -> its whole process tree, itself first."""
    return {r: [r, *descendants(r, kids)] for r in roots if r in table}


def _reading(table: Mapping[int, ProcStat]) -> contextlib.AbstractContextManager[None]:
    """Liveness checks inside a backend's call answer from `table`, when it is a `ProcessTable`."""
    return table_in_use(table) if isinstance(table, ProcessTable) else contextlib.nullcontext()


def process_memory(
    telemetry: Telemetry, pids: Collection[int], table: Mapping[int, ProcStat]
) -> tuple[Mapping[int, Mapping[str, int]], list[str]]:
    """The backend's device memory per process, or none and the reason it failed."""
    try:
        with _reading(table):
            return telemetry.process_device_memory(pids), []
    except Exception as e:
        return {}, [f"process device memory unknown: {type(e).__name__}: {e}"]


def workload_readings(
    telemetry: Telemetry | None,
    roots: Iterable[int],
    partition: str,
    mine: set[str],
    table: Mapping[int, ProcStat] | None = None,
    host: str = "",
    titles: Mapping[int, str] | None = None,
    kids: Mapping[int, Sequence[int]] | None = None,
    trees: Mapping[int, Sequence[int]] | None = None,
) -> tuple[list[WorkloadReading], list[str]]:
    """One reading per Ray worker, over its whole process tree, from one pass
    over the process table, and what could not be read. `titles`: the roots'
    command lines, when the caller has read them already; `trees`:
    `worker_trees` of the roots, likewise."""
    roots = list(roots)
    if not roots:
        return [], []
    procs = process_table() if table is None else table
    if trees is None:
        if kids is None:
            kids = procs.children if isinstance(procs, ProcessTable) else children_map(procs.values())
        trees = worker_trees(roots, kids, procs)
    held: Mapping[int, Mapping[str, int]] = {}
    errors: list[str] = []
    if telemetry is not None:
        held, errors = process_memory(telemetry, [p for tree in trees.values() for p in tree], procs)
    usage = procs.usage if isinstance(procs, ProcessTable) else _usage_of(procs)
    ticks = CLOCK_TICKS
    # This partition's share of each distinct mapping the backend gave, made
    # once: processes with the same mask share one (the mock's do), and the
    # readings then share the (read-only) result. Keyed by identity; each
    # entry keeps its mapping alive, so no identity is reused within the call.
    own: dict[int, tuple[Mapping[str, int], Mapping[str, int]]] = {}
    out = []
    for root, tree in trees.items():
        readings = []
        for pid in tree:
            u = usage(pid)
            if u is None:
                continue  # ended since the table was read
            h = held.get(pid)
            if h:
                seen = own.get(id(h))
                if seen is None:
                    seen = own[id(h)] = (h, h if h.keys() <= mine else {k: v for k, v in h.items() if k in mine})
                memory = seen[1]
            else:
                memory = _NONE
            # tuple.__new__: the NamedTuple's own __new__ is a Python call, per process.
            readings.append(_new_tuple(ProcessReading, (pid, u.name, u.cpu_ticks / ticks, u.rss_bytes, memory)))
        if not readings or readings[0].pid != root:
            continue  # the worker itself ended
        line = titles.get(root) if titles is not None else None
        title = (cmdline(root) if line is None else line).partition(" ")[0] or readings[0].name
        out.append(_new_tuple(WorkloadReading, (f"{title}[{root}]", host, partition, root, tuple(readings))))
    return out, errors


def _usage_of(table: Mapping[int, ProcStat]) -> Callable[[int], Usage | None]:
    """`ProcessTable.usage` for a plain mapping of parsed stats."""

    def usage(pid: int) -> Usage | None:
        st = table.get(pid)
        return None if st is None else Usage(st.name, st.state, st.cpu_ticks, st.start_ticks, st.rss_bytes)

    return usage


def is_ray_worker(title: str) -> bool:
    """A Ray worker's title (`ray::IDLE`, `ray::Holder.where`), not one of Ray's agents."""
    first = title.split(" ")[0]
    return first.startswith("ray::") and "Agent" not in first


# The kernel keeps a process name (comm) of at most 15 characters. Ray's
# workers retitle themselves with setproctitle, which sets comm as well as
# argv (seen on Ray 2.60 workers: comm `ray::PartitionE`, argv
# `ray::PartitionExporter`), so a comm shorter than this is the whole title.
COMM_MAX = 15


def worker_title(pid: int, comm: str) -> str | None:
    """The title of a raylet's child if it is a Ray worker, else None: from
    the stat line's comm, read from `cmdline` only where comm may be cut short
    (Ray's agents, `ray::DashboardAgent`, are told apart only by the full title)."""
    if not comm.startswith("ray::"):
        return None
    title = comm if len(comm) < COMM_MAX else cmdline(pid)
    return title if is_ray_worker(title) else None


def ray_workers(
    raylet_pid: int, exclude: Collection[int], kids: Mapping[int, Sequence[int]], table: Mapping[int, ProcStat]
) -> dict[int, str]:
    """The worker processes a raylet started (its `ray::` children, less Ray's
    own agents), with their titles."""
    # A worker's usage is parsed here once for the whole collection.
    children = [pid for pid in kids.get(raylet_pid, ()) if pid not in exclude]
    if isinstance(table, ProcessTable):
        found = table.usages(children)
    else:
        usage = _usage_of(table)
        found = [usage(pid) for pid in children]
    out = {}
    # A comm shorter than COMM_MAX is the whole title, so its verdict holds
    # for every child that has it: most children share a few.
    whole: dict[str, str | None] = {}
    for pid, u in zip(children, found, strict=True):
        if u is None:
            continue
        comm = u.name
        if len(comm) >= COMM_MAX:
            title = worker_title(pid, comm)
        elif comm in whole:
            title = whole[comm]
        else:
            title = whole[comm] = worker_title(pid, comm)
        if title is not None:
            out[pid] = title
    return out


def orphan_pids(
    holders: Mapping[str, Iterable[int]], mine: Collection[str], workers: Collection[int]
) -> list[tuple[str, int]]:
    """(device, pid) for each holder of one of `mine` that is not in `workers`
    (the raylet's whole process tree), sorted, each once."""
    return sorted({(d, pid) for d, pids in holders.items() if d in mine for pid in pids if pid not in workers})


def orphan_readings(
    telemetry: Telemetry | None,
    mine: Collection[str],
    raylet_pid: int,
    kids: Mapping[int, Sequence[int]],
    table: Mapping[int, ProcStat],
    partition: str,
    host: str,
    known: Collection[int] = (),
) -> tuple[list[OrphanReading], list[str]]:
    """`known`: PIDs the caller knows are in the raylet's tree (its workers'
    trees): the raylet's whole tree is walked only if a holder is not among them."""
    if telemetry is None:
        return [], []
    try:
        with _reading(table):
            holders = telemetry.device_holders()
    except Exception as e:
        return [], [f"device holders unknown: {type(e).__name__}: {e}"]
    outside = orphan_pids(holders, mine, known)
    if not outside:
        return [], []
    workers = {raylet_pid, *descendants(raylet_pid, kids)}
    out = []
    for device, pid in outside:
        if pid in workers:
            continue
        stat = table.get(pid)
        command = cmdline(pid) or (stat.name if stat is not None else "")
        if command:  # else it ended since the backend saw it
            out.append(OrphanReading(device, host, partition, pid, command))
    return out, []


def collect(
    telemetry: Telemetry | None,
    devices: Sequence[Device],
    partition: str,
    accelerator_type: str | None,
    raylet_pid: int | None,
    exclude: set[int] | None = None,
    host: str = "",
    node_id: str = "",
) -> Snapshot:
    start = time.perf_counter()
    readings, errors = device_readings(telemetry, devices, partition, accelerator_type, host)
    workloads: list[WorkloadReading] = []
    orphans: list[OrphanReading] = []
    if raylet_pid is not None:
        table = process_table()
        kids = table.children
        titles = ray_workers(raylet_pid, exclude or set(), kids, table)
        trees = worker_trees(titles, kids, table)
        mine = {d.id for d in devices}
        # Holders first: a backend may answer both from one reading (the mock does).
        known = {pid for tree in trees.values() for pid in tree}
        orphans, orphan_errors = orphan_readings(telemetry, mine, raylet_pid, kids, table, partition, host, known)
        workloads, workload_errors = workload_readings(
            telemetry, titles, partition, mine, table, host, titles, kids, trees
        )
        errors += orphan_errors + workload_errors
    _log_new(partition, errors)
    return Snapshot(
        host,
        node_id,
        partition,
        time.time(),
        time.perf_counter() - start,
        tuple(readings),
        tuple(workloads),
        tuple(orphans),
        tuple(errors),
    )


# The errors last logged per partition: a source that keeps failing is logged
# when it starts to, not at every sample.
_logged: dict[str, frozenset[str]] = {}


def _log_new(partition: str, errors: Sequence[str]) -> None:
    now = frozenset(errors)
    for e in sorted(now - _logged.get(partition, frozenset())):
        log.warning("ray-accel metrics of partition %s: %s", partition, e)
    _logged[partition] = now
