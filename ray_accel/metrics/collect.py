"""Samples at four levels: node, partition, workload, process.

Collection is one function per level over a backend's telemetry and `/proc`;
a source that fails or a device that vanished is reported in the reading,
never raised, so one bad device or sensor does not stop the rest. Export to
Ray's metrics lives in `ray_accel.metrics.export`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ray_accel.core.devices import Device
from ray_accel.core.processes import CLOCK_TICKS, ProcStat, children_map, descendants, snapshot
from ray_accel.plugins.interface import Telemetry


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
    power_watts: float | None = None
    temperature_c: float | None = None


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
    telemetry: Telemetry | None, devices: Sequence[Device], partition: str, accelerator_type: str | None
) -> tuple[list[DeviceReading], list[str]]:
    """This partition's devices only; each one exactly once, tagged with its
    own accelerator type where it has one (a node may hold several models)."""
    kind = {d.id: d.accelerator_type or accelerator_type for d in devices}
    if telemetry is None:
        reason = "this backend takes no device samples"
        return [
            DeviceReading(d.id, partition, d.family, kind[d.id], None, None, d.memory_bytes, None, reason)
            for d in devices
        ], []
    try:
        samples = {s.device_id: s for s in telemetry.device_samples()}
    except Exception as e:
        reason = f"metric source failed: {type(e).__name__}: {e}"
        readings = [
            DeviceReading(d.id, partition, d.family, kind[d.id], None, None, d.memory_bytes, None, reason)
            for d in devices
        ]
        return readings, [reason]
    out = []
    for d in devices:
        s = samples.get(d.id)
        if s is None:
            out.append(
                DeviceReading(
                    d.id, partition, d.family, kind[d.id], None, None, d.memory_bytes, False, "device disappeared"
                )
            )
            continue
        out.append(
            DeviceReading(
                id=d.id,
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
    missing = [d.id for d in out if d.reason == "device disappeared"]
    return out, [f"device {m} disappeared" for m in missing]


def cmdline(pid: int) -> str:
    """The process's command line as one string ('' if it is gone); Ray's
    workers retitle themselves here (`ray::TrainWorker.train`)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read(4096).replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def workload_readings(
    telemetry: Telemetry | None,
    roots: Iterable[int],
    partition: str,
    mine: set[str],
    table: dict[int, ProcStat] | None = None,
) -> list[WorkloadReading]:
    """One reading per Ray worker, over its whole process tree, from one pass
    over the process table."""
    roots = list(roots)
    if not roots:
        return []
    procs = snapshot() if table is None else table
    kids = children_map(procs.values())
    trees = {r: [r, *descendants(r, kids)] for r in roots if r in procs}
    held: dict[int, dict[str, int]] = {}
    if telemetry is not None:
        try:
            held = telemetry.process_device_memory([p for tree in trees.values() for p in tree])
        except Exception:
            held = {}
    out = []
    for root, tree in trees.items():
        readings = tuple(
            ProcessReading(
                pid,
                procs[pid].name,
                procs[pid].cpu_ticks / CLOCK_TICKS,
                procs[pid].rss_bytes,
                {k: v for k, v in held.get(pid, {}).items() if k in mine},
            )
            for pid in tree
            if pid in procs
        )
        title = cmdline(root).split(" ")[0] or procs[root].name
        out.append(WorkloadReading(f"{title}[{root}]", partition, root, readings))
    return out


def ray_workers(raylet_pid: int, exclude: set[int], table: dict[int, ProcStat]) -> list[int]:
    """The worker processes a raylet started (its `ray::` children, less Ray's
    own agents)."""
    out = []
    for pid, stat in table.items():
        if stat.ppid != raylet_pid or pid in exclude:
            continue
        title = cmdline(pid)
        if title.startswith("ray::") and "Agent" not in title.split(" ")[0]:
            out.append(pid)
    return out


def collect(
    telemetry: Telemetry | None,
    devices: Sequence[Device],
    partition: str,
    accelerator_type: str | None,
    raylet_pid: int | None,
    exclude: set[int] | None = None,
) -> Snapshot:
    start = time.perf_counter()
    readings, errors = device_readings(telemetry, devices, partition, accelerator_type)
    workloads: list[WorkloadReading] = []
    if raylet_pid is not None:
        table = snapshot()
        roots = ray_workers(raylet_pid, exclude or set(), table)
        workloads = workload_readings(telemetry, roots, partition, {d.id for d in devices}, table)
    return Snapshot(
        partition, time.time(), time.perf_counter() - start, tuple(readings), tuple(workloads), tuple(errors)
    )
