"""Ray's `Node` (the object `ray start` builds and keeps every process it
spawns on) and Ray's own host sizing rules (Ray 2.60: `ray._private.node`,
`ray._private.utils`, `ray.scripts.scripts`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ray_accel.rayapi.feature import attr, missing, module, require_params

NODE = "ray._private.node"
UTILS = "ray._private.utils"
SCRIPTS = "ray.scripts.scripts"
# Read by `Node` from `RayParams.env_vars` (Ray 2.60 `_private/node.py`): the new node's ID.
NODE_ID_ENV = "RAY_OVERRIDE_NODE_ID_FOR_TESTING"


@dataclass(frozen=True)
class HostSizing:
    """What Ray detects for the whole host: its CPUs and available memory."""

    cpus: int
    available_memory: int


@dataclass(frozen=True)
class NodeFacts:
    """What a started `Node` says about itself."""

    node_id: str
    gcs_address: str
    node_ip: str
    webui_url: str | None  # the head's dashboard, when it runs


def host_sizing() -> HostSizing:
    utils = module(UTILS)
    return HostSizing(int(attr(utils, "get_num_cpus", UTILS)()), int(attr(utils, "estimate_available_memory", UTILS)()))


def object_store_for(available_memory: int) -> int:
    """The object store Ray sizes for `available_memory` bytes (its default
    share, capped by /dev/shm and its maximum)."""
    resolve = attr(module(UTILS), "resolve_object_store_memory", UTILS)
    require_params(resolve, ("available_memory_bytes",), f"{UTILS}.resolve_object_store_memory")
    return int(resolve(available_memory))


def _node_class() -> Any:
    cls = attr(module(NODE), "Node", NODE)
    prepare = attr(cls, "_prepare_socket_file", f"{NODE}.Node")
    require_params(prepare, ("socket_path", "default_prefix"), f"{NODE}.Node._prepare_socket_file")
    return cls


@contextmanager
def capture_nodes(socket_tag: str) -> Iterator[list[Any]]:
    """Within: every `Node` Ray builds in this process is appended to the
    list yielded, its raylet and plasma sockets are named
    `<prefix>.<socket_tag>` in place of Ray's `raylet`, `raylet.1`, ... (Ray
    picks the first free name by looking at the disk, so raylets started at
    the same moment on one host pick the same one), and a new node's ID is
    drawn from `os.urandom`.

    Ray draws a new node's ID with `NodeID.from_random()`
    (`_private/node.py`), from one generator per process that is seeded
    once (C++ `FillRandom`, a static `std::mt19937`). Importing Ray's `ray`
    command seeds it (seen on Ray 2.60 with Serve installed), so every
    launcher a launch server forks afterwards would draw the same ID as its
    siblings, and their raylets would register under one node. The ID is
    given the way Ray's own test clusters give one: `RayParams.env_vars`'s
    `RAY_OVERRIDE_NODE_ID_FOR_TESTING`, which `Node` reads before it starts
    anything and passes on to the raylet it starts."""
    cls = _node_class()
    captured: list[Any] = []
    original_init = cls.__init__
    original_prepare = cls._prepare_socket_file
    id_size = int(attr(module("ray"), "NodeID", "ray").size())

    def capturing_init(self: Any, *args: Any, **kwargs: Any) -> None:
        captured.append(self)
        if not kwargs.get("connect_only", False):
            params: Any = args[0] if args else kwargs.get("ray_params")
            if not hasattr(params, "env_vars"):
                raise missing(f"{NODE}.Node was given no RayParams with env_vars")
            given = params.env_vars or {}
            if NODE_ID_ENV not in given:
                params.env_vars = {**given, NODE_ID_ENV: os.urandom(id_size).hex()}
        original_init(self, *args, **kwargs)

    def tagged_socket(self: Any, socket_path: str | None, default_prefix: str) -> Any:
        if socket_path is None:
            sockets = getattr(self, "_sockets_dir", None)
            if not isinstance(sockets, str):
                raise missing(f"{NODE}.Node has no _sockets_dir")
            socket_path = os.path.join(sockets, f"{default_prefix}.{socket_tag}")
        return original_prepare(self, socket_path, default_prefix)

    cls.__init__ = capturing_init
    cls._prepare_socket_file = tagged_socket
    try:
        yield captured
    finally:
        cls.__init__ = original_init
        cls._prepare_socket_file = original_prepare


def load_ray_cli() -> None:
    """Import Ray's `ray` command and all it imports (about a CPU-second:
    a launch server pays it once for every launcher it forks)."""
    attr(module(SCRIPTS), "cli", SCRIPTS)


def run_ray_cli(args: list[str]) -> None:
    """Ray's own `ray` command, in this process (click's exceptions and
    SystemExit reach the caller)."""
    cli = attr(module(SCRIPTS), "cli", SCRIPTS)
    cli.main(args=args, prog_name="ray", standalone_mode=False)


def node_processes(node: Any) -> list[tuple[str, int]]:
    """(kind, pid) of every process `node` started (Ray's process types)."""
    table = attr(node, "all_processes", f"{NODE}.Node")
    return [(str(kind), int(info.process.pid)) for kind, infos in dict(table).items() for info in infos]


def node_facts(node: Any) -> NodeFacts:
    where = f"{NODE}.Node"
    url = attr(node, "webui_url", where)
    node_id, gcs, ip = (str(attr(node, name, where)) for name in ("node_id", "gcs_address", "node_ip_address"))
    return NodeFacts(node_id, gcs, ip, str(url) if url else None)


def kill_node(node: Any) -> None:
    """Kill every process `node` started, at once."""
    attr(node, "kill_all_processes", f"{NODE}.Node")(check_alive=False, allow_graceful=False)
