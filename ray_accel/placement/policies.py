"""Placement policies: which partition each worker of a training job goes to.

A policy has two calls, both pure:

- `allocate(job, partitions) -> Assignment`: one partition per worker, or
  `PlacementError` naming the largest job of that worker size that fits now;
- `optimize(jobs, partitions, previous, move=False) -> Placement`: an
  assignment for every job that fits, jobs already running (in `previous`) kept
  where they are unless `move` is set; the others wait, with the reason.

`partitions` is the free model of every live partition (`FreePartition`): for
jobs in `previous`, Ray already counts their units as used.

Built in: `pack` (fewest partitions; best fit, so that whole partitions and
hosts stay free for large jobs), `spread` (one worker per host, then per
partition, for fault tolerance), `topology` (a job's workers on linked devices
of one host first).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import ClassVar

from ray_accel.core.errors import InputError
from ray_accel.placement.model import (
    Assignment,
    FreePartition,
    Job,
    Placement,
    PlacementError,
    apply,
    assess,
    capacity,
    largest_fit,
    mark_held,
    refusal,
    slots_for,
)

Choice = list[tuple[FreePartition, int]]  # partitions in order, workers on each


class Policy(ABC):
    """A placement policy: `allocate` and `optimize` around one choice,
    `_choose`, called only when the job fits (the free capacity of its family
    holds every worker)."""

    name: ClassVar[str]

    @abstractmethod
    def _choose(self, job: Job, parts: Sequence[FreePartition]) -> Choice: ...

    def allocate(self, job: Job, partitions: Sequence[FreePartition]) -> Assignment:
        parts = [p for p in partitions if capacity(job, p) > 0]
        if largest_fit(job, parts) < job.workers:
            raise refusal(job, partitions)
        choice = self._choose(job, sorted(parts, key=lambda p: p.key))
        return assess(job, partitions, slots_for(choice))

    def optimize(
        self,
        jobs: Sequence[Job],
        partitions: Sequence[FreePartition],
        previous: Mapping[str, Assignment],
        move: bool = False,
    ) -> Placement:
        ids = [j.id for j in jobs]
        if len(set(ids)) != len(ids):
            dup = next(i for i, n in Counter(ids).items() if n > 1)
            raise InputError(f"job id {dup!r} appears twice")
        parts = tuple(partitions)
        running = [previous[j.id] for j in jobs if j.id in previous]
        placed: dict[str, Assignment] = {}
        if move:
            for a in running:
                parts = apply(parts, a, -1)
            pending = list(jobs)
        else:
            for a in running:
                parts = mark_held(parts, a)
                placed[a.job.id] = a
            pending = [j for j in jobs if j.id not in previous]
        waiting: list[tuple[str, str]] = []
        # Arrival order, each placed if it fits (backfill). Largest first was
        # tried: in bench_placement it made the many small jobs wait longer
        # (mean wait 1.2x Ray's default against 0.75x) for no better placements.
        for job in pending:
            try:
                a = self.allocate(job, parts)
            except PlacementError as e:
                waiting.append((job.id, str(e)))
                continue
            parts = apply(parts, a)
            placed[job.id] = a
        return Placement({j.id: placed[j.id] for j in jobs if j.id in placed}, tuple(waiting))


def _by_host(parts: Sequence[FreePartition]) -> dict[str, list[FreePartition]]:
    out: dict[str, list[FreePartition]] = {}
    for p in parts:
        out.setdefault(p.host, []).append(p)
    return out


def _fill(job: Job, order: Sequence[FreePartition]) -> Choice:
    """`job`'s workers on the partitions in `order`, each as full as it can be, until all are placed."""
    out: Choice = []
    left = job.workers
    for p in order:
        n = min(capacity(job, p), left)
        if n:
            out.append((p, n))
            left -= n
    return out


def _fit_key(
    job: Job, p: FreePartition, n: int, host_free: Mapping[str, int], chosen: Sequence[FreePartition] = ()
) -> tuple[object, ...]:
    """Best fit for `n` workers in `p`: an aligned landing first, then the least
    left over, then linked to the partitions the job already has, then a
    partition already in use, then the fullest host."""
    return (
        p.aligned_blocks(job.devices_per_worker) < n,
        p.free - n * job.devices_per_worker,
        bool(chosen) and not any(c.linked_to(p) for c in chosen),
        p.used == 0,
        host_free[p.host],
        p.key,
    )


def _pack_into(job: Job, parts: Sequence[FreePartition], host_free: Mapping[str, int]) -> Choice:
    """Fewest partitions: the roomiest first, and the one that fits the rest best last."""
    left = job.workers
    pool = list(parts)
    choice: Choice = []
    while left:
        chosen = [c for c, _ in choice]
        # The rest in one partition where one holds it, else the most one can hold.
        whole = [p for p in pool if capacity(job, p) >= left]
        n = left if whole else max(capacity(job, q) for q in pool)
        fits = whole or [q for q in pool if capacity(job, q) == n]
        p = min(fits, key=lambda q: _fit_key(job, q, n, host_free, chosen))
        choice.append((p, n))
        pool.remove(p)
        left -= n
    return choice


class Pack(Policy):
    """Fewest partitions, best fit: a job goes to the partition (or, failing
    that, the host) it fills most, so whole partitions and hosts stay free."""

    name = "pack"

    def _choose(self, job: Job, parts: Sequence[FreePartition]) -> Choice:
        by_host = _by_host(parts)
        host_free = {h: sum(p.free for p in ps) for h, ps in by_host.items()}
        hosts = [h for h, ps in by_host.items() if largest_fit(job, ps) >= job.workers]
        if hosts and not any(capacity(job, p) >= job.workers for p in parts):
            best = min(hosts, key=lambda h: (len(_pack_into(job, by_host[h], host_free)), host_free[h] - job.size, h))
            parts = by_host[best]
        return _pack_into(job, parts, host_free)


class Spread(Policy):
    """Workers across hosts (one host lost costs the fewest workers), then
    across partitions of a host, each time the one with the most room."""

    name = "spread"

    def _choose(self, job: Job, parts: Sequence[FreePartition]) -> Choice:
        room = {p.key: capacity(job, p) for p in parts}
        on_host: Counter[str] = Counter()
        on_part: Counter[tuple[str, str]] = Counter()
        host_room: Counter[str] = Counter()
        for p in parts:
            host_room[p.host] += room[p.key]
        for _ in range(job.workers):
            p = min(
                (q for q in parts if room[q.key] > 0),
                key=lambda q: (on_host[q.host], -host_room[q.host], on_part[q.key], -room[q.key], q.key),
            )
            room[p.key] -= 1
            host_room[p.host] -= 1
            on_host[p.host] += 1
            on_part[p.key] += 1
        return [(p, on_part[p.key]) for p in parts if on_part[p.key]]


def _grow(job: Job, seed: FreePartition, pool: Sequence[FreePartition]) -> Choice | None:
    """Linked partitions from `seed` outward, the roomiest neighbour first,
    until the job fits; None if the linked ones cannot hold it."""
    chosen = [seed]
    left = job.workers - capacity(job, seed)
    while left > 0:
        frontier = [q for q in pool if q not in chosen and any(c.linked_to(q) for c in chosen)]
        if not frontier:
            return None
        whole = [q for q in frontier if capacity(job, q) >= left]
        if whole:
            q = min(whole, key=lambda r: (r.free - left * job.devices_per_worker, r.used == 0, r.key))
        else:
            q = max(frontier, key=lambda r: (capacity(job, r), r.used, r.key))
        chosen.append(q)
        left -= capacity(job, q)
    return _fill(job, chosen)


class Topology(Policy):
    """A job's workers on linked devices: one partition if one holds it, else
    the fewest linked partitions of one host, else the fewest hosts."""

    name = "topology"

    def _choose(self, job: Job, parts: Sequence[FreePartition]) -> Choice:
        by_host = _by_host(parts)
        host_free = {h: sum(p.free for p in ps) for h, ps in by_host.items()}
        whole = [p for p in parts if capacity(job, p) >= job.workers]
        if whole:
            linked = [p for p in whole if p.connected is True] or whole
            p = min(linked, key=lambda q: _fit_key(job, q, job.workers, host_free))
            return [(p, job.workers)]
        options: list[tuple[tuple[object, ...], Choice]] = []
        for host, pool in by_host.items():
            if largest_fit(job, pool) < job.workers:
                continue
            for seed in pool:
                if (grown := _grow(job, seed, pool)) is not None:
                    leftover = sum(p.free for p, _ in grown) - job.size
                    options.append(((0, len(grown), leftover, host_free[host], host, seed.name), grown))
            fallback = _pack_into(job, pool, host_free)
            options.append(((1, len(fallback), host_free[host] - job.size, host_free[host], host, ""), fallback))
        if options:
            return min(options, key=lambda o: o[0])[1]
        # Several hosts: the roomiest hosts first, each filled from its roomiest
        # partition along that one's links.
        order: list[FreePartition] = []
        for host in sorted(by_host, key=lambda h: (-largest_fit(job, by_host[h]), h)):
            seed = min(by_host[host], key=lambda p: (-capacity(job, p), p.key))
            order += sorted(
                by_host[host], key=lambda q: (q is not seed, not seed.linked_to(q), -capacity(job, q), q.key)
            )
        return _fill(job, order)


POLICIES: dict[str, type[Policy]] = {"pack": Pack, "spread": Spread, "topology": Topology}


def get_policy(policy: str | Policy) -> Policy:
    """A policy by name (`pack`, `spread`, `topology`), or the object given."""
    if not isinstance(policy, str):
        return policy
    try:
        return POLICIES[policy.strip().lower()]()
    except KeyError:
        raise InputError(f"unknown placement policy {policy!r}: use one of {', '.join(POLICIES)}") from None
