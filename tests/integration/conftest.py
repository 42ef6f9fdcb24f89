from __future__ import annotations

import os

import psutil
import pytest

from ray_accel.cluster.host import free_port
from tests.clusters import TRN1, TRN1_X4, Cluster, ClusterSpec, SharedClusters, last_json, start_cluster
from tests.multihost.hosts import pids_in_netns

__all__ = ["Cluster", "ClusterSpec", "free_port", "last_json", "raylet_pids", "start_cluster"]


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


# Module-scoped, so module fixtures may use them; the tests sharing one run
# together (tests.clusters.order), so a module's value is never stale.
@pytest.fixture(scope="module")
def trn1_cluster(shared_clusters: SharedClusters) -> Cluster:
    """The shared two-partition mock trn1.32xlarge (`tests.clusters.TRN1`)."""
    return shared_clusters.get(TRN1)


@pytest.fixture(scope="module")
def trn1x4_cluster(shared_clusters: SharedClusters) -> Cluster:
    """The shared four-partition mock trn1.32xlarge (`tests.clusters.TRN1_X4`)."""
    return shared_clusters.get(TRN1_X4)
