"""What the integration tests use to start, share and inspect clusters: the
cluster values and `start_cluster` (from `tests.clusters`, which also runs
the shared pool), and the raylets and other Ray processes of this network
namespace. The fixtures built on them are in tests/integration/conftest.py."""

from __future__ import annotations

import os

import psutil

from ray_accel.cluster.host import free_port
from tests.clusters import Cluster, ClusterSpec, last_json, start_cluster
from tests.multihost.hosts import pids_in_netns

__all__ = ["Cluster", "ClusterSpec", "free_port", "last_json", "ray_processes", "raylet_pids", "start_cluster"]


def ray_processes(names: tuple[str, ...]) -> set[int]:
    """PIDs of the live (not zombie) processes named one of `names` in this
    network namespace. Ray's ports are per namespace, so a suite running in a
    namespace of its own (beside another on the same machine) counts only its
    own processes. The executable must bear the name too: the pure tier, which
    runs beside the Ray tier, starts `sleep` through a link named `raylet`."""
    out = set()
    for pid in pids_in_netns({os.stat("/proc/self/ns/net").st_ino}):
        try:
            proc = psutil.Process(pid)
            if proc.name() in names and os.path.basename(proc.exe()) in names:
                out.add(pid)
        except psutil.Error:
            continue  # ended meanwhile
    return out


def raylet_pids() -> set[int]:
    """The live raylets of this network namespace."""
    return ray_processes(("raylet",))
