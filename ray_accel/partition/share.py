"""Dividing one host's CPUs, memory, object store and custom resources between
its partitions, and placing each partition's raylet on CPUs.

Plain `ray start` claims the whole host for its one raylet. With N raylets on a
host each would claim it again (N times the host in the cluster's totals), so
every amount is read as the host's and divided in proportion to each
partition's accelerator units (its devices; NeuronCores on Neuron). The sums
over a host's partitions equal the host's amounts exactly.

Whole amounts (CPUs, bytes, whole custom resources) are divided by largest
remainder. Every partition gets at least one CPU when the host has as many
CPUs as partitions; with fewer CPUs than partitions the sum still equals the
host's, so some partitions get none (named in a warning): a task there must
ask for ``num_cpus=0``, or the user passes a larger host figure (``-- --num-cpus
N``) to count CPUs more than once on purpose.

CPU placement: where the host has several NUMA nodes and all of a partition's
devices sit on one of them, its raylet runs on that NUMA node's CPUs (those this
process may use); otherwise it is not pinned, and the reason is kept.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

from ray_accel.core.errors import InputError
from ray_accel.core.numa import NumaTopology, format_cpulist

# Ray keeps resource amounts in units of 1/10000 (its kResourceUnitScaling).
RESOURCE_UNIT = Fraction(1, 10000)


class ShareError(InputError):
    """Host amounts that cannot be divided as asked."""


@dataclass(frozen=True)
class HostResources:
    """The amounts plain `ray start` would give the whole host (or the user's
    figures for it): CPUs, bytes of `memory`, bytes of object store, and the
    user's custom resources."""

    cpus: int
    memory: int
    object_store_memory: int
    resources: Mapping[str, float] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)  # amount -> "host" or the user's flag


@dataclass(frozen=True)
class Share:
    """One partition's part of the host, and where its raylet runs."""

    partition: str
    cpus: int
    memory: int
    object_store_memory: int
    resources: Mapping[str, float] = field(default_factory=dict)
    cpu_set: tuple[int, ...] | None = None  # None: not pinned
    pin_reason: str | None = None  # why not pinned, or which NUMA node it is pinned to

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "cpu_set": None if self.cpu_set is None else list(self.cpu_set)}


@dataclass(frozen=True)
class Division:
    shares: tuple[Share, ...]
    pinning: str  # "on", or "off: <why>"
    warnings: tuple[str, ...] = ()


def split_whole(
    total: int, weights: Sequence[int], at_least_one: bool = True, floors: Sequence[int] | None = None
) -> list[int]:
    """`total` whole units in proportion to `weights`, summing to `total`.

    Largest remainder: each part is its exact quota rounded down or up, ties to
    the lower index. Each part then gets at least its floor (default: one unit
    with `at_least_one`, none without) whenever `total` covers every floor,
    taken from the parts furthest above their quotas."""
    if total < 0:
        raise ShareError(f"cannot divide a negative amount {total}")
    if not weights:
        return []
    if any(w < 0 for w in weights):
        raise ShareError(f"negative weight in {list(weights)}")
    ws = list(weights) if sum(weights) > 0 else [1] * len(weights)
    n, whole = len(ws), sum(ws)
    quota = [Fraction(total * w, whole) for w in ws]
    parts = [math.floor(q) for q in quota]
    for i in sorted(range(n), key=lambda i: (-(quota[i] - parts[i]), i))[: total - sum(parts)]:
        parts[i] += 1
    least = list(floors) if floors is not None else [1 if at_least_one else 0] * n
    if total >= sum(least):
        for i in range(n):
            while parts[i] < least[i]:
                donor = max(
                    (j for j in range(n) if parts[j] > least[j]), key=lambda j: (parts[j] - quota[j], parts[j], j)
                )
                parts[donor] -= 1
                parts[i] += 1
    return parts


def split_cpus(total: int, weights: Sequence[int], groups: Sequence[object]) -> list[int]:
    """CPUs in proportion to `weights`, first between groups of partitions that
    share CPUs (those pinned to one NUMA node; the unpinned), then within each
    group, so no group is counted more CPUs than its share while another gets
    none. Every partition gets one when `total` allows."""
    members = [[i for i, g in enumerate(groups) if g == k] for k in dict.fromkeys(groups)]
    floors = [len(m) for m in members] if total >= len(weights) else None
    per_group = split_whole(total, [sum(weights[i] for i in m) for m in members], floors=floors)
    out = [0] * len(weights)
    for amount, m in zip(per_group, members, strict=True):
        for i, part in zip(m, split_whole(amount, [weights[i] for i in m]), strict=True):
            out[i] = part
    return out


def split_amount(total: float, weights: Sequence[int]) -> list[float]:
    """A custom resource amount divided like CPUs: whole units if the amount
    is whole, else in Ray's units of 1/10000. No minimum per part."""
    if not math.isfinite(total) or total < 0:
        raise ShareError(f"cannot divide {total!r}")
    unit = Fraction(1) if float(total).is_integer() else RESOURCE_UNIT
    return [float(p * unit) for p in split_whole(round(Fraction(total) / unit), weights, at_least_one=False)]


def place_cpus(
    numa_nodes: Sequence[Collection[int]], topology: NumaTopology, allowed: Collection[int]
) -> tuple[list[tuple[tuple[int, ...] | None, str]], str]:
    """Per partition (given the NUMA nodes of its devices): its CPU set (None:
    not pinned) and a reason, plus "on" or "off: <why>" for the host."""
    nodes = topology.cpu_nodes
    if topology.error is not None or len(nodes) < 2:
        why = f"the host has one NUMA node with CPUs ({topology.root})"
        if topology.error is not None:
            why = f"NUMA topology unknown ({topology.error})"
        return [(None, why) for _ in numa_nodes], f"off: {why}"
    usable = frozenset(allowed)

    def pin(numa: Collection[int]) -> tuple[tuple[int, ...] | None, str]:
        known = sorted(set(numa))
        if not known or any(n < 0 for n in known):
            return None, "the NUMA node of its devices is unknown"
        if len(known) > 1:
            return None, f"its devices sit on NUMA nodes {','.join(map(str, known))}"
        if known[0] not in nodes:
            return None, f"NUMA node {known[0]} has no CPUs under {topology.root}"
        if cpus := nodes[known[0]] & usable:
            return tuple(sorted(cpus)), f"NUMA node {known[0]}"
        return None, (
            f"none of NUMA node {known[0]}'s CPUs ({format_cpulist(nodes[known[0]])}) "
            f"are allowed to this process ({format_cpulist(usable)})"
        )

    out = [pin(numa) for numa in numa_nodes]
    pinned = any(s is not None for s, _ in out)
    return out, "on" if pinned else "off: no partition's devices sit on a single NUMA node with usable CPUs"


def divide(
    names: Sequence[str],
    weights: Sequence[int],
    numa_nodes: Sequence[Collection[int]],
    host: HostResources,
    topology: NumaTopology,
    allowed: Collection[int],
    min_object_store: int = 0,
) -> Division:
    """Each partition's share of `host`, and its CPU placement."""
    placement, pinning = place_cpus(numa_nodes, topology, allowed)
    cpus = split_cpus(host.cpus, weights, [cpu_set for cpu_set, _ in placement])
    memory = split_whole(host.memory, weights)
    store = split_whole(host.object_store_memory, weights)
    custom = {k: split_amount(v, weights) for k, v in host.resources.items()}
    warnings: list[str] = []
    small = [(n, s) for n, s in zip(names, store, strict=True) if s < min_object_store]
    if small:
        raise ShareError(
            f"partition {small[0][0]}'s object store would be {small[0][1]} bytes, below Ray's minimum "
            f"{min_object_store}: give a larger host figure with -- --object-store-memory, or fewer partitions"
        )
    idle = [n for n, c in zip(names, cpus, strict=True) if c == 0]
    if idle and host.cpus < len(names):
        warnings.append(
            f"partition(s) {', '.join(idle)} get 0 CPUs: the host's {host.cpus} CPU(s) are fewer than its "
            f"{len(names)} partitions; tasks there must ask for num_cpus=0, or pass -- --num-cpus N "
            f"(a host total of at least {len(names)}) to count CPUs more than once on purpose"
        )
    for key, parts in custom.items():
        empty = [n for n, p in zip(names, parts, strict=True) if p == 0]
        if empty and host.resources[key] > 0:
            warnings.append(f"resource {key!r} ({host.resources[key]:g}) divided: {', '.join(empty)} get none")
    shares = []
    for i, name in enumerate(names):
        cpu_set, reason = placement[i]
        if cpu_set is not None and cpus[i] > len(cpu_set):
            warnings.append(f"partition {name}: {cpus[i]} CPUs counted but pinned to {len(cpu_set)} ({reason})")
        own = {k: v[i] for k, v in custom.items() if v[i] > 0}
        shares.append(Share(name, cpus[i], memory[i], store[i], own, cpu_set, reason))
    return Division(tuple(shares), pinning, tuple(warnings))
