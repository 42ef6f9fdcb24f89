"""What a placement policy reasons about, as frozen values: a training job, the
free model of one partition, and where each worker of a job goes.

The free model is what Ray can tell about a partition's raylet at this moment
(its total and available units and CPUs) plus what the partition's labels say
it holds (host, devices, cores, links). Ray never says *which* units of a
raylet are free, and gives no way to ask for particular ones: a raylet grants
an integer request the lowest-indexed free instances (Ray 2.60,
src/ray/common/scheduling/resource_instance_set.cc,
`NodeResourceInstanceSet::TryAllocate`), and slot i is the i-th id of the
raylet's mask. So a worker lands on an aligned, contiguous block when the
partition is wholly free, or when every grant in it has the worker's size
(lowest-first grants of one size keep the free slots a union of aligned
blocks of that size). A policy chooses partitions and counts; the raylet
chooses the cores.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ray_accel.core.errors import InputError, RayAccelError


@dataclass(frozen=True, kw_only=True)
class Job:
    """A training job: `workers` workers, each asking `devices_per_worker` units
    of `resource` (NeuronCores on Neuron, GPUs on CUDA) and `cpus_per_worker` CPUs."""

    id: str
    name: str
    workers: int
    devices_per_worker: int
    family: str
    resource: str
    cpus_per_worker: float = 0.0

    def __post_init__(self) -> None:
        for what, value in (("workers", self.workers), ("devices_per_worker", self.devices_per_worker)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"job {self.name!r}: {what} must be a whole number of at least 1, got {value!r}")
        cpus = self.cpus_per_worker
        if not (isinstance(cpus, int | float) and math.isfinite(cpus) and cpus >= 0):
            raise InputError(f"job {self.name!r}: cpus_per_worker must be a number >= 0, got {self.cpus_per_worker!r}")
        if not self.family or not self.resource:
            raise InputError(f"job {self.name!r}: family and resource must be named")

    @property
    def size(self) -> int:
        return self.workers * self.devices_per_worker

    def describe(self) -> str:
        return f"{self.workers} worker(s) x {self.devices_per_worker} {self.resource} ({self.size} in all)"


@dataclass(frozen=True, kw_only=True)
class FreePartition:
    """One partition's raylet as a policy sees it now."""

    host: str
    name: str
    node_id: str
    family: str
    resource: str
    total: int
    free: int
    core_ids: tuple[int, ...] = ()  # every id of its mask, sorted; () when not known
    device_ids: tuple[int, ...] = ()  # device indexes; () when not known
    links: frozenset[int] = frozenset()  # device indexes of its host, outside it, its devices link to
    connected: bool | None = None  # its own devices linked to each other; None when not known
    cpus_free: float = math.inf
    held: tuple[int, ...] = ()  # sizes of the grants placed here that ray-accel knows of

    @property
    def key(self) -> tuple[str, str]:
        return (self.host, self.name)

    @property
    def used(self) -> int:
        return self.total - self.free

    def aligned_blocks(self, size: int) -> int:
        """How many `size`-unit grants Ray would give here now on aligned,
        contiguous ids (see the module docstring)."""
        if size == 1:
            return self.free  # one id is always an aligned block
        ids = self.core_ids
        contiguous = bool(ids) and list(ids) == list(range(ids[0], ids[0] + len(ids)))
        if not contiguous or size < 1 or self.total % size or ids[0] % size:
            return 0
        if self.used and (sum(self.held) != self.used or any(h != size for h in self.held)):
            return 0
        return self.free // size

    def linked_to(self, other: FreePartition) -> bool:
        return self.host == other.host and bool(self.links & set(other.device_ids))


@dataclass(frozen=True)
class Slot:
    """Where one worker goes."""

    host: str
    partition: str
    node_id: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.host, self.partition)


@dataclass(frozen=True)
class Assignment:
    """One partition per worker of `job`, and how good the placement is."""

    job: Job
    workers: tuple[Slot, ...]
    connected: bool  # one host, each partition internally linked, the partitions linked to each other
    aligned: bool  # every worker gets an aligned, contiguous block of ids

    def per_partition(self) -> dict[tuple[str, str], int]:
        return dict(Counter(s.key for s in self.workers))

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(sorted({s.host for s in self.workers}))


@dataclass(frozen=True)
class Placement:
    """What `optimize` decides: an assignment per placed job; the rest wait, with the reason."""

    assignments: Mapping[str, Assignment] = field(default_factory=dict)
    waiting: tuple[tuple[str, str], ...] = ()  # (job id, why it does not fit now)


class PlacementError(RayAccelError):
    """A job that does not fit the free partitions now; nothing was started.

    `largest_workers` is the most workers of the job's size that fit now,
    `largest_worker` the most units one worker could get now."""

    def __init__(self, message: str, job: Job, largest_workers: int, largest_worker: int) -> None:
        super().__init__(message)
        self.job = job
        self.largest_workers = largest_workers
        self.largest_worker = largest_worker


def eligible(job: Job, part: FreePartition) -> bool:
    return part.family == job.family and part.resource == job.resource


def capacity(job: Job, part: FreePartition) -> int:
    """How many of `job`'s workers fit in `part` now."""
    if not eligible(job, part):
        return 0
    n = part.free // job.devices_per_worker
    if job.cpus_per_worker > 0 and math.isfinite(part.cpus_free):
        n = min(n, math.floor(part.cpus_free / job.cpus_per_worker + 1e-9))
    return max(0, n)


def largest_fit(job: Job, partitions: Iterable[FreePartition]) -> int:
    return sum(capacity(job, p) for p in partitions)


def refusal(job: Job, partitions: Sequence[FreePartition]) -> PlacementError:
    """The error for a job that does not fit: the most workers of its size that
    fit now and the largest single worker, with the free units per partition."""
    mine = [p for p in partitions if eligible(job, p)]
    fit = largest_fit(job, mine)
    if not mine:
        families = ", ".join(sorted({f"{p.family}/{p.resource}" for p in partitions})) or "none"
        offers = f"no live partition offers {job.family}/{job.resource} (live partitions offer: {families})"
        return PlacementError(f"job {job.name!r} asks {job.describe()}, but {offers}", job, 0, 0)
    cpu_ok = [p for p in mine if job.cpus_per_worker <= 0 or p.cpus_free + 1e-9 >= job.cpus_per_worker]
    best = max(cpu_ok, key=lambda p: (p.free, p.host, p.name), default=None)
    one = best.free if best is not None else 0
    where = f" (partition {best.name} on {best.host})" if best is not None and one else ""
    free = ", ".join(f"{p.host}/{p.name} {p.free}/{p.total}" for p in sorted(mine, key=lambda p: p.key))
    cpus = f" and {job.cpus_per_worker:g} CPU(s)" if job.cpus_per_worker > 0 else ""
    return PlacementError(
        f"job {job.name!r} asks {job.describe()}, which does not fit now: the largest job of "
        f"{job.devices_per_worker} {job.resource}{cpus} per worker that fits is {fit} worker(s) "
        f"({fit * job.devices_per_worker} {job.resource}); the largest single worker that fits is "
        f"{one} {job.resource}{where}; free {job.resource}: {free}",
        job,
        fit,
        one,
    )


def _take(part: FreePartition, job: Job, count: int, sign: int) -> FreePartition:
    units = count * job.devices_per_worker
    held = list(part.held)
    if sign > 0:
        held += [job.devices_per_worker] * count
    else:
        for _ in range(count):
            if job.devices_per_worker in held:
                held.remove(job.devices_per_worker)
    cpus = part.cpus_free - sign * count * job.cpus_per_worker
    return replace(part, free=part.free - sign * units, cpus_free=cpus, held=tuple(held))


def apply(partitions: Sequence[FreePartition], assignment: Assignment, sign: int = +1) -> tuple[FreePartition, ...]:
    """The partitions after `assignment`'s workers took their units (`sign`
    -1: gave them back, a job moved or ended)."""
    counts = assignment.per_partition()
    return tuple(_take(p, assignment.job, counts[p.key], sign) if p.key in counts else p for p in partitions)


def mark_held(partitions: Sequence[FreePartition], assignment: Assignment) -> tuple[FreePartition, ...]:
    """Record the grant sizes of a job that already runs (its units already
    count as used in Ray's view), so alignment can be judged."""
    counts = assignment.per_partition()
    return tuple(
        replace(p, held=p.held + (assignment.job.devices_per_worker,) * counts[p.key]) if p.key in counts else p
        for p in partitions
    )


def partitions_connected(parts: Sequence[FreePartition]) -> bool:
    """One host, each partition's devices linked, and the partitions linked to each other."""
    if not parts or len({p.host for p in parts}) != 1 or any(p.connected is not True for p in parts):
        return False
    seen, stack = {0}, [0]
    while stack:
        i = stack.pop()
        for j, q in enumerate(parts):
            if j not in seen and parts[i].linked_to(q):
                seen.add(j)
                stack.append(j)
    return len(seen) == len(parts)


def assess(job: Job, partitions: Sequence[FreePartition], slots: Sequence[Slot]) -> Assignment:
    """The assignment of `slots`, judged against the partitions before it."""
    by_key = {p.key: p for p in partitions}
    counts = Counter(s.key for s in slots)
    used = [by_key[k] for k in counts]
    aligned = all(by_key[k].aligned_blocks(job.devices_per_worker) >= n for k, n in counts.items())
    return Assignment(job, tuple(slots), partitions_connected(used), aligned)


def slots_for(parts: Sequence[tuple[FreePartition, int]]) -> list[Slot]:
    """Slots in order: `count` workers on each partition."""
    return [Slot(p.host, p.name, p.node_id) for p, count in parts for _ in range(count)]
