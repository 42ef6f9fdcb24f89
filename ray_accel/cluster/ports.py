"""Distinct, checked ports for several raylets on one host.

Each raylet gets a block of consecutive ports: a few named ones, then its
worker-port range, sized for the workers it may run. Every port is checked by
binding before any raylet starts, so a taken port is a clear error, not a
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

import math
import os
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ray_accel.core.errors import InputError

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
