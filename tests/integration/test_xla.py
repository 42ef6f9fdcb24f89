"""The XLA lane (make test-xla): torch-xla on PJRT CPU inside mock Neuron partitions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ray_accel.core.visibility import parse_visible_ids
from tests.integration import drivers
from tests.integration.cluster_harness import Cluster, ClusterSpec, start_cluster

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


def test_an_xla_job_over_both_partitions_keeps_ranks_in_sync_and_each_worker_on_its_own_cores(
    cluster: Cluster, tmp_path: Path
) -> None:
    """One XLA job, four workers over two partitions on one IP (one fit: XLA
    compiles on the CPU, so each fit costs tens of seconds): every worker is
    on an `xla` device of PJRT CPU, sees exactly its own NeuronCores inside
    its partition, shares none, trains, and ends with the weights of every
    other rank; Ray's own context agrees with ray-accel's per-raylet ranks
    (see test_train_context.py). Two jobs at once in two partitions are
    test_train.py's (gloo; the partition's isolation does not depend on the
    collective)."""
    cores = {p["partition"]: set(p["core_ids"]) for p in cluster.status["partitions"]}
    kw = {"partition": "p0,p1", "workers": 4, "out": str(tmp_path / "both"), "backend": "xla", "steps": 20}
    result = cluster.driver(drivers.TRAIN_JOB, json.dumps(kw), timeout=500)
    assert result["ok"], result
    reports = [json.loads((tmp_path / "both" / f"rank{r}.json").read_text()) for r in range(4)]
    for r in reports:
        ours = {k: r[k] for k in ("world_rank", "world_size", "local_rank", "local_world_size", "node_rank")}
        assert r["ray_context"] == ours and r["backend"] == "xla", r
        assert r["env"]["PJRT_DEVICE"] == "CPU" and r["device"].startswith("xla"), r["device"]
        assert r["local_world_size"] == 2 and r["losses"][-1] < r["losses"][0] / 5
        # A NeuronCore belongs to one process: each worker sees exactly its own.
        assert parse_visible_ids(r["visible"]) == sorted(int(i) for i in r["own_ids"]), r
        assert {int(i) for i in r["own_ids"]} <= cores[r["partition"]]
    assert [r["partition"] for r in reports] == ["p0", "p0", "p1", "p1"]
    owned = [int(i) for r in reports for i in r["own_ids"]]
    assert len(owned) == len(set(owned)), "no core is shared"
    assert [r["ray_context"]["local_rank"] for r in reports] == [0, 1, 0, 1]
    assert [r["ray_context"]["node_rank"] for r in reports] == [0, 0, 1, 1]
    assert len({json.dumps(r["weights"]) for r in reports}) == 1, "XLA ranks stay in sync through the reduction"
