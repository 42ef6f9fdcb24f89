"""Ray's own Train context inside partitions.

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

The Train V2 fits run once per module, one after another in one driver
(`drivers.TRAIN_JOBS`); V1 needs a driver of its own (the Train version is
chosen when `ray.train` is first imported).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration import drivers
from tests.integration.cluster_harness import Cluster

pytestmark = pytest.mark.ray

# What Ray's V1 test expects for 4 workers over 2 same-IP raylets, 2 each.
PER_RAYLET = {"local_rank": [0, 1, 0, 1], "local_world_size": [2, 2, 2, 2], "node_rank": [0, 0, 1, 1]}
SPREAD = {"partition": "p0,p1", "workers": 4}


@pytest.fixture(scope="module")
def cluster(trn1_cluster: Cluster) -> Cluster:
    return trn1_cluster


def reports(out: Path, n: int = 4) -> list[dict[str, Any]]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(n)]


@pytest.fixture(scope="module")
def v2(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """The V2 fits, 4 workers over both partitions each: Ray's own TorchConfig
    (the control), ray-accel's with `auto`, and Ray's API alone (prepare_model)
    over ray-accel's gloo group. Name -> the workers' reports, in rank order."""
    tmp = tmp_path_factory.mktemp("v2")
    kws = {
        "plain": {**SPREAD, "out": str(tmp / "plain"), "steps": 3, "ray_only": True, "plain_ray": True},
        "auto": {**SPREAD, "out": str(tmp / "auto"), "steps": 10, "backend": "auto"},
        "ray_only": {**SPREAD, "out": str(tmp / "ray_only"), "steps": 30, "ray_only": True, "backend": "gloo"},
    }
    results = cluster.driver(drivers.TRAIN_JOBS, json.dumps(kws), timeout=900)
    for key, result in results.items():
        assert result["ok"], (key, result)
    return {key: reports(tmp / key) for key in kws}


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


def test_plain_ray_v2_reports_per_ip_ranks_in_partitions(v2: dict[str, list[dict[str, Any]]]) -> None:
    """The control: Ray's own TorchConfig, the same placement. Ray Train V2
    groups by IP, so every worker is on "node" 0 of a local world of 4
    (ray/train/v2/_internal/execution/worker_group/worker_group.py:1094-1111)."""
    assert columns(v2["plain"]) == {
        "local_rank": [0, 1, 2, 3],
        "local_world_size": [4, 4, 4, 4],
        "node_rank": [0, 0, 0, 0],
    }


def test_ray_context_reports_per_raylet_ranks_on_v2(v2: dict[str, list[dict[str, Any]]]) -> None:
    """`auto` on the mock Neuron host is gloo through the Neuron runtime's
    per-process environment. With `gloo` named, the same ranks reach Ray's
    context too: the Ray-only fit below reads only Ray's."""
    check_agrees(v2["auto"])


def test_ray_context_stays_right_on_v1(cluster: Cluster, tmp_path: Path) -> None:
    """RAY_TRAIN_V2_ENABLED=0 (driver and workers). V1 has no label
    selectors: 8 of a partition's 16 cores per worker puts two in each."""
    kw = {"partition": None, "workers": 4, "per_worker": 8, "out": str(tmp_path / "v1"), "steps": 10, "train_v1": True}
    result = cluster.driver(drivers.TRAIN_JOB, json.dumps(kw), timeout=500)
    assert result["ok"], result
    got = reports(tmp_path / "v1")
    parts = [r["partition"] for r in got]
    assert parts[0] == parts[1] != parts[2] == parts[3], parts
    # V1's ranks are per node id already (ray#46163): ray-accel's agree.
    for rank, r in enumerate(got):
        ours = {k: r[k] for k in ("world_rank", "world_size", "local_rank", "local_world_size", "node_rank")}
        assert r["ray_context"] == ours, (rank, r["ray_context"], ours)
    assert columns(got) == PER_RAYLET
    assert len({json.dumps(r["weights"]) for r in got}) == 1
    # V1 runs the backend inside its placement group: the job store made
    # from there must outlive the group (it is a detached actor).
    listed = cluster.cli("jobs", "--json")
    assert listed.returncode == 0, listed.stderr[-2000:]


def test_ray_only_ddp_with_prepare_model_over_both_partitions(v2: dict[str, list[dict[str, Any]]]) -> None:
    """No ray-accel helper in the loop, only ray.train.torch.prepare_model
    (DistributedDataParallel over the group AcceleratorTorchConfig(backend="gloo")
    made), spread over both partitions: Ray's context (which prepare_model
    reads) gives per-raylet ranks, and DDP keeps all four in sync."""
    got = v2["ray_only"]
    for r in got:
        assert r["wrapped"] == "DistributedDataParallel"
        assert r["device"] == "cpu"
        assert r["losses"][-1] < r["losses"][0] / 10, "the loss goes down"
    assert columns(got) == PER_RAYLET
    assert len({json.dumps(r["weights"]) for r in got}) == 1, "identical weights: DDP averaged the gradients"
    assert len({json.dumps(r["losses"]) for r in got}) == 4, "each rank trained on its own data"
