"""Ray's own Train context inside partitions (issue 20 point 1, issue 12 acceptance 3).

Two partitions (raylets) of a mock trn1.32xlarge on one host, so one IP, and
four training workers, two in each. The reference is Ray's own upstream test
of this situation for V1, python/ray/train/tests/test_backend.py
(ray-project/ray @ 00501e2bd10f17c70dc12cdf54a203cf2db02a09):
`test_local_ranks_with_same_ip_nodes` (4 workers on 2 same-IP nodes give
local ranks [0, 1, 0, 1]), `test_local_world_size_with_same_ip_nodes` and
`test_node_ranks_with_same_ip_nodes` (ranks follow the node id, never the IP).
Ray Train V2 (the default in 2.60) groups by IP instead, and has no such test
(python/ray/train/v2/tests/test_worker_group.py computes the expected local
ranks by node id inside the test and never calls `_assign_worker_ranks`).
Here each worker reads `ray.train.get_context()` itself, as Ray's docs tell
users to.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration import drivers
from tests.integration.conftest import Cluster, start_cluster

pytestmark = pytest.mark.ray

# What Ray's V1 test expects for 4 workers over 2 same-IP raylets, 2 each.
PER_RAYLET = {"local_rank": [0, 1, 0, 1], "local_world_size": [2, 2, 2, 2], "node_rank": [0, 0, 1, 1]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # 2 CPUs per raylet: Ray Train's controller (V2) or trainer actor (V1, 1 CPU).
    c = start_cluster(tmp_path_factory.mktemp("ctx"), "trn1.32xlarge", 2, "--num-cpus", "2")
    try:
        yield c
    finally:
        c.cli("stop", "--grace", "2")


def job(cluster: Cluster, **kw: Any) -> list[dict[str, Any]]:
    result: dict[str, Any] = cluster.driver(drivers.TRAIN_JOB, json.dumps(kw), timeout=500)
    assert result["ok"], result
    n = kw.get("workers", 2)
    return [json.loads((Path(kw["out"]) / f"rank{r}.json").read_text()) for r in range(n)]


def columns(reports: list[dict[str, Any]], key: str = "ray_context") -> dict[str, list[int]]:
    return {k: [r[key][k] for r in reports] for k in PER_RAYLET}


def check_agrees(reports: list[dict[str, Any]]) -> None:
    for rank, r in enumerate(reports):
        ours = {k: r[k] for k in ("world_rank", "world_size", "local_rank", "local_world_size", "node_rank")}
        assert r["ray_context"] == ours, f"rank {rank}: ray.train.get_context() {r['ray_context']} vs ray-accel {ours}"
        env = r["env"]
        assert (env["RANK"], env["WORLD_SIZE"]) == (str(rank), str(len(reports)))
        assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"], env["NODE_RANK"]) == (
            str(r["local_rank"]),
            str(r["local_world_size"]),
            str(r["node_rank"]),
        )
    assert columns(reports) == PER_RAYLET
    assert [r["partition"] for r in reports] == ["p0", "p0", "p1", "p1"]
    assert len({json.dumps(r["weights"]) for r in reports}) == 1, "identical weights on all four ranks"


def test_plain_ray_v2_reports_per_ip_ranks_in_partitions(cluster: Cluster, tmp_path: Path) -> None:
    """The control: Ray's own TorchConfig, the same placement. Ray Train V2
    groups by IP, so every worker is on "node" 0 of a local world of 4
    (ray/train/v2/_internal/execution/worker_group/worker_group.py:1094-1111)."""
    reports = job(
        cluster, partition="p0,p1", workers=4, out=str(tmp_path / "plain"), steps=3, ray_only=True, plain_ray=True
    )
    assert columns(reports) == {
        "local_rank": [0, 1, 2, 3],
        "local_world_size": [4, 4, 4, 4],
        "node_rank": [0, 0, 0, 0],
    }


@pytest.mark.parametrize("backend", ["gloo", "auto"])
def test_ray_context_reports_per_raylet_ranks_on_v2(cluster: Cluster, tmp_path: Path, backend: str) -> None:
    """`auto` on the mock Neuron node is gloo through the Neuron runtime's
    per-process environment; the fix does not depend on the collective."""
    reports = job(cluster, partition="p0,p1", workers=4, out=str(tmp_path / "v2"), steps=10, backend=backend)
    check_agrees(reports)


def test_ray_context_stays_right_on_v1(cluster: Cluster, tmp_path: Path) -> None:
    """RAY_TRAIN_V2_ENABLED=0 (driver and workers). V1 has no label
    selectors: 8 of a partition's 16 cores per worker puts two in each."""
    reports = job(cluster, partition=None, workers=4, per_worker=8, out=str(tmp_path / "v1"), steps=10, train_v1=True)
    parts = [r["partition"] for r in reports]
    assert parts[0] == parts[1] != parts[2] == parts[3], parts
    # V1's ranks are per node id already (ray#46163): ray-accel's agree.
    for rank, r in enumerate(reports):
        ours = {k: r[k] for k in ("world_rank", "world_size", "local_rank", "local_world_size", "node_rank")}
        assert r["ray_context"] == ours, (rank, r["ray_context"], ours)
    assert columns(reports) == PER_RAYLET
    assert len({json.dumps(r["weights"]) for r in reports}) == 1


def test_ray_only_ddp_with_prepare_model_trains_in_a_partition(cluster: Cluster, tmp_path: Path) -> None:
    """Issue 12 acceptance 3: no ray-accel helper in the loop, only
    ray.train.torch.prepare_model (DistributedDataParallel over the group
    AcceleratorTorchConfig(backend="gloo") made)."""
    reports = job(
        cluster, partition="p1", workers=2, out=str(tmp_path / "ddp"), steps=30, ray_only=True, backend="gloo"
    )
    for r in reports:
        assert r["wrapped"] == "DistributedDataParallel"
        assert r["device"] == "cpu"
        assert r["losses"][-1] < r["losses"][0] / 10, "the loss goes down"
        assert r["ray_context"]["local_world_size"] == 2
    assert reports[0]["weights"] == reports[1]["weights"], "identical weights: DDP averaged the gradients"
    assert reports[0]["losses"] != reports[1]["losses"], "each rank trained on its own data"


def test_ray_only_ddp_spread_over_both_partitions(cluster: Cluster, tmp_path: Path) -> None:
    """The same Ray-only job over both partitions: Ray's context (which
    prepare_model reads) gives per-raylet ranks, and DDP keeps all four in sync."""
    reports = job(
        cluster, partition="p0,p1", workers=4, out=str(tmp_path / "ddp4"), steps=10, ray_only=True, backend="gloo"
    )
    assert columns(reports) == PER_RAYLET
    assert len({json.dumps(r["weights"]) for r in reports}) == 1
