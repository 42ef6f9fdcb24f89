"""TorchNeuron beside XLA on real Ray and real torch, with a fake TorchNeuron
(tests/fakes/torch_neuronx_fake.py) on the PYTHONPATH of the clusters'
raylets only: their training workers load it through `import torch`, the
driver and this test process never do.

A mock trn2.48xlarge split in 2, started with the fake on its raylets'
PYTHONPATH, used by one driver and stopped inside its fixture (three fits:
`auto` over both partitions with DDP; a worker asking for two cores;
`neuron` in a job whose workers have no TorchNeuron); and the shared mock
trn1.32xlarge split in 2, whose one fit gets the fake through its job's
runtime environment (`auto` does not pick TorchNeuron there).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from ray_accel.core.visibility import parse_visible_ids
from tests.cli_process import repo_pythonpath
from tests.fakes.torch_neuronx_fake import ONE_DEVICE
from tests.fakes.torchneuron import RECORD_ENV, install, records
from tests.integration.cluster_harness import Cluster, ClusterSpec, start_cluster
from tests.integration.torchneuron_loops import reference_weights

pytestmark = pytest.mark.ray

STEPS = 5
PER_RANK = 16

# Fits one after another in one driver. argv[2]: name -> {partitions,
# workers, cores, backend, out, env_vars}; a fit with `env_vars` runs in a job
# whose workers get them through Ray's runtime environment (so they come last).
# Prints name -> {ok, error, run_id, collective, collective_reason} (the last
# two as the job store shows the job).
JOBS = r"""
import json, os, sys
import ray
from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from ray_accel.jobs.store import read_jobs
from ray_accel.train import AcceleratorTorchConfig
from tests.integration.torchneuron_loops import ddp_loop

address, fits = sys.argv[1], json.loads(sys.argv[2])
out = {}
for name, kw in fits.items():
    env = {"env_vars": kw["env_vars"]} if kw["env_vars"] else None
    if ray.is_initialized() and env:
        ray.shutdown()
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False, runtime_env=env)
    parts = kw["partitions"]
    selector = [{"ray-accel.io/partition": p} for p in parts for _ in range(kw["workers"] // len(parts))]
    config = AcceleratorTorchConfig(backend=kw["backend"])
    trainer = TorchTrainer(
        ddp_loop,
        train_loop_config={"steps": kw["steps"], "per_rank": kw["per_rank"], "out": kw["out"]},
        torch_config=config,
        scaling_config=ScalingConfig(
            num_workers=kw["workers"],
            resources_per_worker={"CPU": 0, "neuron_cores": kw["cores"]},
            label_selector=selector,
        ),
        run_config=RunConfig(
            name=f"{name}-{os.getpid()}",
            storage_path=os.path.join(kw["out"], "ray_results"),
            failure_config=FailureConfig(max_failures=0),
        ),
    )
    try:
        trainer.fit()
        out[name] = {"ok": True, "run_id": config.run_id}
    except Exception as e:
        out[name] = {"ok": False, "error": f"{type(e).__name__}: {e}", "run_id": config.run_id}
jobs = {j.id: j for j in read_jobs()}
for row in out.values():
    job = jobs.get(row["run_id"])
    row.update(collective=job and job.collective, collective_reason=job and job.collective_reason)
print(json.dumps(out))
"""


def with_fake(tmp: Path) -> dict[str, str]:
    """The environment that gives a process the fake: PYTHONPATH with its site
    first, and where it writes its records (tmp/record)."""
    site = install(tmp / "site")
    return {"PYTHONPATH": os.pathsep.join([str(site), repo_pythonpath()]), RECORD_ENV: str(tmp / "record")}


def run_fits(cluster: Cluster, tmp: Path, fits: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`fits` in one driver on `cluster`: the results, the status, the fake's records."""
    assert "torch_neuronx" not in os.environ.get("PYTHONPATH", ""), "the test process never has the fake"
    for kw in fits.values():
        kw.setdefault("steps", STEPS)
        kw.setdefault("per_rank", PER_RANK)
        kw.setdefault("env_vars", None)
        kw["out"] = str(tmp / kw["out"])
    results = cluster.driver(JOBS, json.dumps(fits), timeout=1200)
    record = tmp / "record"
    return {"results": results, "status": cluster.status, "records": records(record) if record.exists() else []}


def reports(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]


@pytest.fixture(scope="module")
def trn2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("trn2")
    fits = {
        "ddp": {"partitions": ["p0", "p1"], "workers": 4, "cores": 1, "backend": "auto", "out": "ddp"},
        "two_cores": {"partitions": ["p0"], "workers": 2, "cores": 2, "backend": "auto", "out": "two"},
        "neuron_without": {
            "partitions": ["p1"], "workers": 2, "cores": 1, "backend": "neuron", "out": "neuron-without",
            "env_vars": {"PYTHONPATH": repo_pythonpath()},
        },
    }  # fmt: skip
    spec = ClusterSpec("trn2", "trn2.48xlarge", 2, start_args=("--no-metrics",), env=with_fake(tmp))
    cluster: Cluster = start_cluster(tmp, spec)
    try:
        return tmp, run_fits(cluster, tmp, fits)
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def trn1(trn1_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("trn1")
    fits = {
        "auto": {
            "partitions": ["p0", "p1"], "workers": 2, "cores": 1, "backend": "auto", "out": "auto",
            "env_vars": with_fake(tmp),
        },
    }  # fmt: skip
    return tmp, run_fits(trn1_cluster, tmp, fits)


def test_auto_on_trn2_with_torchneuron_trains_ddp_over_both_partitions_to_the_whole_batch_result(
    trn2: tuple[Path, dict[str, Any]],
) -> None:
    tmp, run = trn2
    result = run["results"]["ddp"]
    assert result["ok"], result
    assert (result["collective"], result["collective_reason"]) == ("neuron", ""), "the job shows the collective"
    ranks = reports(tmp / "ddp")
    assert [r["world_rank"] for r in ranks] == [0, 1, 2, 3]
    for r in ranks:
        assert r["backend"] == r["group"] == "neuron" and r["backend_reason"] == ""
        assert r["losses"][-1] < r["losses"][0]
    assert len({json.dumps(r["weights"]) for r in ranks}) == 1, "every rank ends with the same weights"
    expected = reference_weights(world=4, per_rank=PER_RANK, steps=STEPS)
    close = [math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6) for a, b in zip(ranks[0]["weights"], expected, strict=True)]
    assert all(close), ("the same as one process on the whole batch", ranks[0]["weights"], expected)


def test_the_fake_counted_each_worker_s_all_reduces_and_saw_no_fork(trn2: tuple[Path, dict[str, Any]]) -> None:
    tmp, run = trn2
    pids = {r["pid"] for r in reports(tmp / "ddp")}
    rows = {row["pid"]: row for row in run["records"]}
    assert pids <= set(rows), "every DDP worker made the fake's `neuron` group"
    for pid in pids:
        counts = rows[pid]["collectives"]
        assert counts.get("allreduce") == STEPS, f"DDP's one gradient bucket per step: {counts}"
        assert counts.get("broadcast", 0) >= 1, "DDP broadcast rank 0's weights at the start"
    assert not [row for row in run["records"] if row["forked_from"] is not None], "no worker forked"


def test_each_neuron_worker_saw_exactly_its_own_core_inside_its_partition(trn2: tuple[Path, dict[str, Any]]) -> None:
    tmp, run = trn2
    cores = {p["partition"]: set(p["core_ids"]) for p in run["status"]["partitions"]}
    ranks = reports(tmp / "ddp")
    assert [r["partition"] for r in ranks] == ["p0", "p0", "p1", "p1"]
    for r in ranks:
        assert len(r["own_ids"]) == 1 and parse_visible_ids(r["visible"]) == [int(r["own_ids"][0])], r
        assert int(r["own_ids"][0]) in cores[r["partition"]]
        assert r["privateuse1"] == "neuron" and r["device"] == f"neuron:{r['local_rank']}", "numbered by LOCAL_RANK"
        assert (r["current_device"], r["device_count"]) == (r["local_rank"], 2), "as TorchNeuron answers"
        assert r["env"]["LOCAL_RANK"] == str(r["local_rank"]) and r["env"]["LOCAL_WORLD_SIZE"] == "2"
    opened = sorted(c for row in run["records"] if row["forked_from"] is None for c in row["cores"])
    assert opened == sorted(int(r["own_ids"][0]) for r in ranks), "the fake opened each worker's core, once"
    assert len({r["env"]["NEURON_RT_ROOT_COMM_ID"] for r in ranks}) == 1


def test_ray_s_own_context_agrees_with_the_per_partition_ranks(trn2: tuple[Path, dict[str, Any]]) -> None:
    tmp, _ = trn2
    for r in reports(tmp / "ddp"):
        ours = {k: r[k] for k in ("world_rank", "world_size", "local_rank", "local_world_size", "node_rank")}
        assert r["ray_context"] == ours
    assert [r["local_rank"] for r in reports(tmp / "ddp")] == [0, 1, 0, 1]


def test_a_neuron_worker_asking_for_two_cores_is_refused_at_start_naming_the_rule(
    trn2: tuple[Path, dict[str, Any]],
) -> None:
    tmp, run = trn2
    result = run["results"]["two_cores"]
    assert not result["ok"], result
    assert "exactly one logical NeuronCore per process" in result["error"] and ONE_DEVICE in result["error"]
    assert "holds 2" in result["error"]
    assert not reports(tmp / "two"), "training never started"


def test_without_the_fake_backend_neuron_is_refused_at_start_naming_what_is_missing(
    trn2: tuple[Path, dict[str, Any]],
) -> None:
    tmp, run = trn2
    refused = run["results"]["neuron_without"]
    assert not refused["ok"], refused
    assert "backend 'neuron' cannot be made in this training worker: TorchNeuron is not installed" in refused["error"]
    assert "no torch.backends entry point" in refused["error"]
    assert not reports(tmp / "neuron-without"), "training never started"


def test_auto_on_trn1_with_torchneuron_installed_does_not_pick_it_and_says_why(
    trn1: tuple[Path, dict[str, Any]],
) -> None:
    tmp, run = trn1
    result = run["results"]["auto"]
    assert result["ok"], result
    why = "TorchNeuron is installed but supports Trainium2 and Trainium3 only"
    assert result["collective"] == "gloo" and why in result["collective_reason"], result
    for r in reports(tmp / "auto"):
        assert r["privateuse1"] == "neuron", "the fake was loaded in the worker"
        assert r["backend"] == r["group"] == "gloo" and why in r["backend_reason"]
    assert not [row for row in run["records"] if row["runtime_started"]], "no Neuron runtime was started"
