"""The XLA lane (make test-xla): torch-xla on PJRT CPU inside mock Neuron partitions."""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ray_accel.core.visibility import parse_visible_ids
from tests.integration import drivers
from tests.integration.conftest import Cluster, ClusterSpec, start_cluster
from tests.integration.test_train import ranks

pytestmark = [pytest.mark.xla, pytest.mark.ray]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    pytest.importorskip("torch_xla", reason="the XLA lane runs in .venv-xla (make test-xla)")
    spec = ClusterSpec("xla", "trn1.32xlarge", 2, start_args=("--no-metrics",), ray_args=("--num-cpus", "2"))
    c = start_cluster(tmp_path_factory.mktemp("xla"), spec)
    try:
        yield c
    finally:
        c.stop()


def test_xla_jobs_in_both_partitions_keep_ranks_in_sync(cluster: Cluster, tmp_path: Path) -> None:
    cores = {p["partition"]: set(p["core_ids"]) for p in cluster.status["partitions"]}

    def run(part: str) -> dict[str, Any]:
        kw = {"partition": part, "out": str(tmp_path / part), "backend": "xla", "steps": 20}
        result: dict[str, Any] = cluster.driver(drivers.TRAIN_JOB, json.dumps(kw), timeout=500)
        return result

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = dict(zip(("p0", "p1"), pool.map(run, ("p0", "p1")), strict=True))
    for part, result in results.items():
        assert result["ok"], result
        r0, r1 = ranks(tmp_path / part)
        for r in (r0, r1):
            assert r["backend"] == "xla" and r["env"]["PJRT_DEVICE"] == "CPU"
            assert r["device"].startswith("xla"), r["device"]
            assert r["local_world_size"] == 2 and r["partition"] == part
            assert r["losses"][-1] < r["losses"][0] / 5
        for r in (r0, r1):
            # A NeuronCore belongs to one process: each worker sees exactly its own.
            assert parse_visible_ids(r["visible"]) == sorted(int(i) for i in r["own_ids"]), r
            assert r["ray_context"]["local_rank"] == r["local_rank"]
        assert not {int(i) for i in r0["own_ids"]} & {int(i) for i in r1["own_ids"]}
        assert {int(i) for r in (r0, r1) for i in r["own_ids"]} <= cores[part]
        assert r0["weights"] == r1["weights"], "XLA ranks stay in sync through the gloo reduction"


def test_xla_job_over_both_partitions_gets_ray_context_per_raylet(cluster: Cluster, tmp_path: Path) -> None:
    """Ray's own context for the XLA backend: four workers, two partitions on
    one IP; Ray's own context agrees with ray-accel's (see test_train_context.py)."""
    kw = {"partition": "p0,p1", "workers": 4, "out": str(tmp_path / "both"), "backend": "xla", "steps": 10}
    result = cluster.driver(drivers.TRAIN_JOB, json.dumps(kw), timeout=500)
    assert result["ok"], result
    reports = [json.loads((tmp_path / "both" / f"rank{r}.json").read_text()) for r in range(4)]
    for r in reports:
        ours = {k: r[k] for k in ("world_rank", "world_size", "local_rank", "local_world_size", "node_rank")}
        assert r["ray_context"] == ours and r["backend"] == "xla", r
    assert [r["ray_context"]["local_rank"] for r in reports] == [0, 1, 0, 1]
    assert [r["ray_context"]["node_rank"] for r in reports] == [0, 0, 1, 1]
    assert len({json.dumps(r["weights"]) for r in reports}) == 1
