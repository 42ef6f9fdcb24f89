"""This host: the node IP Ray uses for its raylets, its amounts as plain `ray
start` would claim them, and each partition's share of them and of its
ports.

The node IP is decided the way `ray start` decides it (Ray 2.60,
`ray/scripts/scripts.py` `start` and `ray/_private/services.py`): the
`--node-ip-address` given after `--`, where `localhost`, `127.0.0.1` and `::1`
stand for the address Ray detects (`resolve_ip_for_localhost`); without one,
the address Ray detects, from the GCS's perspective on a joining host
(`get_node_ip_address(bootstrap_address)`) and from a public address's on a
head. `ray.util.get_node_ip_address` is that detection; it falls back to
resolving the host name, then to loopback, where there is no route out.
`start` then passes the address to every raylet, so the labels, the record
and Ray agree, and `--recover` restarts raylets on the same address. A host is
its name and that address (`ray_accel.core.hosts`).

The host's amounts. The user's `--num-cpus`, `--memory` and
`--object-store-memory` (after `--`, `ray_accel.cluster.raylet.user_figures`)
are read as the host's figures, in place of what Ray would detect. Detection
uses Ray's own functions, so a share is what Ray would size for that part of
the host: `memory` = available memory less the object store, the object store
= Ray's default proportion of available memory, capped by /dev/shm and Ray's
maximum (`ray._private.utils.resolve_object_store_memory`, Ray 2.60).

Each partition's share. Plain `ray start` claims the whole host for its one
raylet. With N raylets on a host each would claim it again (N times the host
in the cluster's totals), so every amount is read as the host's and divided in
proportion to each partition's accelerator units (its devices; NeuronCores on
Neuron). The sums over a host's raylets equal the host's amounts exactly.
Whole amounts (CPUs, bytes, whole custom resources) are divided by largest
remainder (`divide`, a pure function). On a head host the head's own raylet
takes its share (`HEAD_SHARE`: Ray's smallest object store, no CPUs, no
`memory`) first, and the partitions divide what is left (`partitions_host`),
so the host's raylets, the head's included, claim the host's amounts once. Every partition gets at least one CPU
when the host has as many CPUs as partitions; with fewer CPUs than partitions
the sum still equals the host's, so some partitions get none (named in a
warning): a task there must ask for ``num_cpus=0``, or the user passes a
larger host figure (``-- --num-cpus N``) to count CPUs more than once on
purpose.

CPU placement: where the host has several NUMA nodes and all of a partition's
devices sit on one of them, its raylet runs on that NUMA node's CPUs (those this
process may use); otherwise it is not pinned, and the reason is kept.

Ports. Each raylet gets a block of consecutive ports: a few named ones, then
its worker-port range, sized for the workers it may run. Every port is checked
by binding before any raylet starts, so a taken port is a clear error, not a
half-started raylet.

Worker ports: every worker process of a raylet (task workers, actors, drivers
attached to it, I/O workers) binds one port from the raylet's range, and a
raylet whose range is used up cannot start another worker. Ray starts up to
its CPU count of workers at once (``maximum_startup_concurrency`` in
``ray/_private/services.py``) and keeps about as many idle for reuse per job;
each actor holds one for its life, and with fractional device shares several
actors share one device. Hence: 2 per CPU, 4 per device unit, 64 spare, and
never fewer than 184 (what every raylet had before ranges were sized).

The Ray client server: `ray start --head` binds it to 10001 whenever Ray's
client dependencies import (``scripts.py``: no port given and
``get_ray_client_dependency_error() is None`` means 10001), so a second head on
one host would collide there. A head gets a port from its own block instead;
without the dependencies Ray refuses any port (``RayParams._check_usage``) and
starts no client server, so none is given.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

from ray_accel.core.errors import InputError
from ray_accel.core.hosts import HostId, canonical_ip, is_localhost, this_host_name
from ray_accel.core.numa import NumaTopology, format_cpulist, read_topology
from ray_accel.core.validate import HEAD
from ray_accel.partition.plan import Partition
from ray_accel.rayapi import node as rayapi_node
from ray_accel.rayapi.feature import RayApiMissing

NAMED = (
    "node_manager_port",
    "object_manager_port",
    "dashboard_agent_listen_port",
    "dashboard_agent_grpc_port",
    "runtime_env_agent_port",
    "metrics_export_port",
    "dashboard_port",
    "ray_client_server_port",
)
# Ports only a head binds; a raylet joining a cluster is never given them.
HEAD_ONLY = ("dashboard_port", "ray_client_server_port")
FIRST_WORKER_OFFSET = 16
MIN_WORKER_PORTS = 184
MAX_WORKER_PORTS = 20000
WORKERS_PER_CPU = 2
WORKERS_PER_UNIT = 4
SPARE_WORKERS = 64
SEARCH_FROM, SEARCH_STEP, LAST_PORT = 21000, 1000, 65535


class PortError(InputError):
    """A port that is taken or out of range."""


@dataclass(frozen=True)
class RayletPorts:
    base: int
    named: dict[str, int]
    min_worker_port: int
    max_worker_port: int

    def all(self) -> list[int]:
        return [*self.named.values(), *range(self.min_worker_port, self.max_worker_port + 1)]


def worker_port_count(cpus: float, units: int) -> int:
    """Worker ports for a raylet with `cpus` CPUs and `units` device units."""
    wanted = WORKERS_PER_CPU * math.ceil(max(0.0, cpus)) + WORKERS_PER_UNIT * max(0, units) + SPARE_WORKERS
    return min(MAX_WORKER_PORTS, max(MIN_WORKER_PORTS, wanted))


def worker_ports(units: Sequence[int], given_cpus: int | None, max_workers: int | None) -> list[int]:
    """Worker ports for raylets of `units` device units each: `max_workers`,
    or what each one's CPUs and units need. Its CPUs: the user's --num-cpus
    `given_cpus` (an upper bound however it is divided), or the host's in
    proportion to its units."""
    if max_workers is not None:
        return [max_workers for _ in units]
    host, total = os.cpu_count() or 1, max(1, sum(units))
    return [worker_port_count(given_cpus if given_cpus is not None else host * n / total, n) for n in units]


def raylet_ports(base: int, workers: int = MIN_WORKER_PORTS, client_server: bool = False) -> RayletPorts:
    """One raylet's block at `base`: the named ports, then `workers` worker ports."""
    names = [k for k in NAMED if client_server or k != "ray_client_server_port"]
    return RayletPorts(
        base=base,
        named={k: base + i for i, k in enumerate(names)},
        min_worker_port=base + FIRST_WORKER_OFFSET,
        max_worker_port=base + FIRST_WORKER_OFFSET + workers - 1,
    )


def port_blocks(base: int, workers: Sequence[int], client_server: bool = False) -> list[RayletPorts]:
    """Consecutive blocks from `base`, one per raylet; the first (the head's)
    holds the client server port when `client_server`."""
    blocks: list[RayletPorts] = []
    for i, n in enumerate(workers):  # each from the port after the last one's worker ports
        blocks.append(raylet_ports(blocks[-1].max_worker_port + 1 if blocks else base, n, client_server and i == 0))
    return blocks


def is_free(port: int, host: str = "") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port the kernel says is free now (for a GCS port or a test)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def check_free(ports: Iterable[int], what: str) -> None:
    for p in ports:
        if not 1024 <= p <= LAST_PORT:
            raise PortError(f"{what}: port {p} is outside 1024..{LAST_PORT}")
        if not is_free(p):
            raise PortError(f"{what}: port {p} is already in use")


def plan_ports(workers: Sequence[int], base: int | None, client_server: bool = False) -> list[RayletPorts]:
    """Blocks for raylets needing `workers[i]` worker ports each: at `base`
    (every port must be free), or the first fully free base in a default range."""
    if base is not None:
        blocks = port_blocks(base, workers, client_server)
        for i, b in enumerate(blocks):
            check_free(b.all(), f"--port-base {base} (raylet #{i})")
        return blocks
    span = sum(FIRST_WORKER_OFFSET + n for n in workers)
    for candidate in range(SEARCH_FROM, LAST_PORT - span + 2, SEARCH_STEP):
        blocks = port_blocks(candidate, workers, client_server)
        if all(is_free(p) for b in blocks for p in b.all()):
            return blocks
    raise PortError(f"no free block of {span} ports found between {SEARCH_FROM} and {LAST_PORT}; pass --port-base")


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


@dataclass(frozen=True, kw_only=True)
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
        shares.append(
            Share(
                partition=name,
                cpus=cpus[i],
                memory=memory[i],
                object_store_memory=store[i],
                resources=own,
                cpu_set=cpu_set,
                pin_reason=reason,
            )
        )
    return Division(tuple(shares), pinning, tuple(warnings))


log = logging.getLogger(__name__)

# The user's `ray start` options that name the host's figures (by their key) and its node IP.
HOST_FLAGS = {"--num-cpus": "cpus", "--memory": "memory", "--object-store-memory": "object_store_memory"}
NODE_IP_FLAG = "--node-ip-address"

# Ray 2.60's ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES: a raylet refuses less.
OBJECT_STORE_MINIMUM = 75 * 1024 * 1024
# A head's own raylet (docs/design.md): no CPUs, devices or memory to
# schedule on; Ray's smallest object store. It comes out of the host's
# figures before the partitions divide them (`partitions_host`).
HEAD_SHARE = Share(partition=HEAD, cpus=0, memory=0, object_store_memory=OBJECT_STORE_MINIMUM)


def partitions_host(host: HostResources, head: Share | None) -> HostResources:
    """What the partitions divide: `host` less the share of the head's own
    raylet (`head`; None on a host that joins a cluster and so runs none), so
    that the host's raylets together, the head's included, claim exactly the
    figures ray-accel divides (the machine's or the user's), never more.
    Custom resources are the partitions' alone: the head gets none."""
    if head is None:
        return host
    left = HostResources(
        cpus=host.cpus - head.cpus,
        memory=host.memory - head.memory,
        object_store_memory=host.object_store_memory - head.object_store_memory,
        resources=host.resources,
        sources=host.sources,
    )
    if left.object_store_memory < 0:
        raise ShareError(
            f"the host's object store of {host.object_store_memory} bytes cannot hold the head raylet's "
            f"{head.object_store_memory} (Ray's minimum): give a larger host figure with -- --object-store-memory"
        )
    return left


def _ray_detected() -> tuple[int, int, Callable[[int], int]]:
    """CPUs, available memory and Ray's object-store sizing rule, from Ray's
    own functions (psutil and Ray 2.60's 30%, with a warning, where this Ray
    lacks them)."""
    try:
        sizing = rayapi_node.host_sizing()
        rayapi_node.object_store_for(sizing.available_memory)  # the rule is there, and takes what we pass
        return sizing.cpus, sizing.available_memory, rayapi_node.object_store_for
    except RayApiMissing as e:
        import psutil

        log.warning("ray-accel: %s; the host is sized with psutil and 30%% of its memory for the object store", e)
        vm = psutil.virtual_memory()
        return os.cpu_count() or 1, int(vm.total - vm.used), lambda avail: int(avail * 0.3)


def read_host(figures: Mapping[str, int], resources: Mapping[str, float] | None = None) -> HostResources:
    """The host's amounts: the user's `figures` (`RayOptions.figures`), else Ray's own."""
    cpus, available, size_store = _ray_detected()
    store = figures.get("object_store_memory", int(size_store(available)))
    memory = figures.get("memory", available - store)
    if memory <= 0:
        raise InputError(
            f"--object-store-memory {store} leaves no memory for tasks: the host has {available} bytes available"
        )
    sources = {key: flag if key in figures else "host" for flag, key in HOST_FLAGS.items()}
    return HostResources(figures.get("cpus", cpus), memory, store, dict(resources or {}), sources)


def allowed_cpus() -> frozenset[int]:
    """The CPUs this process may run on (a cpuset or `taskset` narrows them)."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return frozenset(range(os.cpu_count() or 1))


def divide_host(parts: Sequence[Partition], numa: Sequence[Collection[int]], host: HostResources) -> Division:
    """Each of `parts` (its devices on the NUMA nodes `numa[i]`) gets amounts
    of `host` in proportion to its units, placed on the CPUs this process may use."""
    names, units = [p.name for p in parts], [len(p.core_ids) for p in parts]
    return divide(names, units, numa, host, read_topology(), allowed_cpus(), OBJECT_STORE_MINIMUM)


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Ray's C++ detection logs its fallback straight to file descriptor 2; a
    refused `start` prints one line there, so that log goes nowhere (the
    address chosen is in `status`)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def detected_ip(gcs_address: str | None) -> str:
    """The address Ray itself would give this host's raylet."""
    import ray.util

    with _quiet_stderr():
        return str(ray.util.get_node_ip_address(gcs_address))


def node_ip(given: str | None, gcs_address: str | None) -> str:
    """The node IP this host's raylets will use (see the module doc), from
    the `--node-ip-address` given, if any; one that is not an IP address is
    refused, naming it."""
    if given is None:
        ip = detected_ip(gcs_address)
    elif is_localhost(given.strip()):
        ip = detected_ip(None)
    else:
        ip = given.strip()
    canonical = canonical_ip(ip)
    if canonical is None:
        source = f"{NODE_IP_FLAG} {given!r}" if given is not None else f"Ray's address for this host {ip!r}"
        raise InputError(f"{source} is not an IP address: ray-accel tells hosts apart by their node IP")
    return canonical


def this_host(ip: str) -> HostId:
    return HostId(this_host_name(), ip)


def local_addresses() -> frozenset[str]:
    """The IP addresses of this host's interfaces now (in its network namespace), canonical."""
    import psutil

    families = (socket.AF_INET, socket.AF_INET6)
    found = [canonical_ip(a.address) for addrs in psutil.net_if_addrs().values() for a in addrs if a.family in families]
    # An IPv6 link-local address also without its zone (`fe80::1%eth0`).
    return frozenset(x for ip in found if ip is not None for x in (ip, ip.split("%", 1)[0]))
