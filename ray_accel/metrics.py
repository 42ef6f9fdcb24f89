"""Samples at four levels: node, agent (partition), workload, process.

Collection is one function per level over a plugin and psutil; a source that
fails or a device that vanished is reported in the reading, never raised, so
one bad device or sensor does not stop the rest. Export to Ray's metrics lives
in `ray_accel.exporter`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

from ray_accel.devices import Device
from ray_accel.plugin import DevicePlugin


@dataclass(frozen=True)
class DeviceReading:
    id: str
    partition: str
    family: str
    accelerator_type: str | None
    utilization: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    healthy: bool | None  # None: unknown, the source failed
    reason: str | None = None


@dataclass(frozen=True)
class ProcessReading:
    pid: int
    name: str
    cpu_seconds: float
    rss_bytes: int
    device_memory_bytes: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkloadReading:
    workload: str  # the Ray worker's process title and pid
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
            "partition": self.partition,
            "pid": self.pid,
            "pids": [p.pid for p in self.processes],
            "cpu_seconds": self.cpu_seconds,
            "rss_bytes": self.rss_bytes,
            "device_memory_bytes": self.device_memory_bytes,
        }


@dataclass(frozen=True)
class Snapshot:
    partition: str
    taken_at: float
    took_s: float
    devices: tuple[DeviceReading, ...]
    workloads: tuple[WorkloadReading, ...]
    errors: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "taken_at": self.taken_at,
            "took_s": self.took_s,
            "devices": [asdict(d) for d in self.devices],
            "workloads": [w.to_json() for w in self.workloads],
            "errors": list(self.errors),
        }


def device_readings(
    plugin: DevicePlugin, devices: Sequence[Device], partition: str, accelerator_type: str | None
) -> tuple[list[DeviceReading], list[str]]:
    """This partition's devices only; each one exactly once."""
    try:
        samples = {s.device_id: s for s in plugin.gather_node_metrics()}
    except Exception as e:
        reason = f"metric source failed: {type(e).__name__}: {e}"
        readings = [
            DeviceReading(d.id, partition, d.family, accelerator_type, None, None, d.memory_bytes, None, reason)
            for d in devices
        ]
        return readings, [reason]
    out = []
    for d in devices:
        s = samples.get(d.id)
        if s is None:
            out.append(
                DeviceReading(
                    d.id, partition, d.family, accelerator_type, None, None, d.memory_bytes, False, "device disappeared"
                )
            )
            continue
        out.append(
            DeviceReading(
                id=d.id,
                partition=partition,
                family=d.family,
                accelerator_type=accelerator_type,
                utilization=s.utilization,
                memory_used_bytes=s.memory_used_bytes,
                memory_total_bytes=s.memory_total_bytes,
                healthy=s.healthy,
                reason=s.health_reason,
            )
        )
    missing = [d.id for d in out if d.reason == "device disappeared"]
    return out, [f"device {m} disappeared" for m in missing]


def process_reading(plugin: DevicePlugin | None, proc: psutil.Process, mine: set[str]) -> ProcessReading | None:
    try:
        with proc.oneshot():
            times = proc.cpu_times()
            reading = ProcessReading(proc.pid, proc.name(), times.user + times.system, proc.memory_info().rss)
    except psutil.Error:
        return None  # it ended while we looked
    if plugin is not None:
        try:
            held = plugin.gather_process_metrics(proc.pid).device_memory_bytes
            reading = ProcessReading(
                reading.pid,
                reading.name,
                reading.cpu_seconds,
                reading.rss_bytes,
                {k: v for k, v in held.items() if k in mine},
            )
        except Exception:
            pass
    return reading


def workload_readings(
    plugin: DevicePlugin | None, roots: Iterable[psutil.Process], partition: str, mine: set[str]
) -> list[WorkloadReading]:
    """One reading per Ray worker, over its whole process tree."""
    roots = list(roots)
    kids = children_map() if roots else {}
    out = []
    for root in roots:
        try:
            tree = [root, *descendants(root.pid, kids)]
            title = " ".join(root.cmdline()[:1]) or root.name()
        except psutil.Error:
            continue
        procs = tuple(r for r in (process_reading(plugin, p, mine) for p in tree) if r is not None)
        if procs:
            out.append(WorkloadReading(f"{title}[{root.pid}]", partition, root.pid, procs))
    return out


def children_map() -> dict[int, list[psutil.Process]]:
    """Parent pid -> child processes, from one pass over the process table
    (`Process.children(recursive=True)` rescans the whole table per call)."""
    out: dict[int, list[psutil.Process]] = {}
    for p in psutil.process_iter(["ppid"]):
        out.setdefault(p.info["ppid"], []).append(p)
    return out


def descendants(pid: int, kids: dict[int, list[psutil.Process]]) -> list[psutil.Process]:
    out: list[psutil.Process] = []
    stack = list(kids.get(pid, []))
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(kids.get(p.pid, []))
    return out


def ray_workers(raylet_pid: int, exclude: set[int]) -> list[psutil.Process]:
    """The worker processes a raylet started (its `ray::` children)."""
    try:
        children = psutil.Process(raylet_pid).children()
    except psutil.Error:
        return []
    out = []
    for c in children:
        try:
            if c.pid not in exclude and c.name().startswith("ray::") and "Agent" not in c.name():
                out.append(c)
        except psutil.Error:
            continue
    return out


def collect(
    plugin: DevicePlugin,
    devices: Sequence[Device],
    partition: str,
    accelerator_type: str | None,
    workload_roots: Iterable[psutil.Process],
) -> Snapshot:
    start = time.perf_counter()
    readings, errors = device_readings(plugin, devices, partition, accelerator_type)
    workloads = workload_readings(plugin, workload_roots, partition, {d.id for d in devices})
    return Snapshot(
        partition, time.time(), time.perf_counter() - start, tuple(readings), tuple(workloads), tuple(errors)
    )
