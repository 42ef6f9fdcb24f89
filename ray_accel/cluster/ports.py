"""Distinct, checked ports for several raylets on one host.

Each raylet gets a block of consecutive ports: a few named ones, then its
worker-port range. Every port is checked by binding before any raylet starts,
so a taken port is a clear error, not a half-started node.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from dataclasses import dataclass

from ray_accel.core.errors import InputError

BLOCK = 200
NAMED = (
    "node_manager_port",
    "object_manager_port",
    "dashboard_agent_listen_port",
    "dashboard_agent_grpc_port",
    "runtime_env_agent_port",
    "metrics_export_port",
    "dashboard_port",
)
FIRST_WORKER_OFFSET = 16
DEFAULT_SEARCH = range(21000, 60000, 1000)


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

    def ray_start_args(self, head: bool) -> list[str]:
        args = []
        for key, port in self.named.items():
            if not head and key == "dashboard_port":
                continue
            args += [f"--{key.replace('_', '-')}", str(port)]
        return [*args, "--min-worker-port", str(self.min_worker_port), "--max-worker-port", str(self.max_worker_port)]


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


def raylet_ports(base: int, index: int) -> RayletPorts:
    start = base + index * BLOCK
    return RayletPorts(
        base=start,
        named={k: start + i for i, k in enumerate(NAMED)},
        min_worker_port=start + FIRST_WORKER_OFFSET,
        max_worker_port=start + BLOCK - 1,
    )


def check_free(ports: Iterable[int], what: str) -> None:
    for p in ports:
        if not 1024 <= p <= 65535:
            raise PortError(f"{what}: port {p} is outside 1024..65535")
        if not is_free(p):
            raise PortError(f"{what}: port {p} is already in use")


def plan_ports(count: int, base: int | None) -> list[RayletPorts]:
    """Blocks for `count` raylets: at `base` (every port must be free), or the
    first fully free base in a default range."""
    if base is not None:
        blocks = [raylet_ports(base, i) for i in range(count)]
        for i, b in enumerate(blocks):
            check_free(b.all(), f"--port-base {base} (raylet #{i})")
        return blocks
    for candidate in DEFAULT_SEARCH:
        blocks = [raylet_ports(candidate, i) for i in range(count)]
        if all(is_free(p) for b in blocks for p in b.all()):
            return blocks
    raise PortError("no free block of ports found between 21000 and 60000; pass --port-base")
