"""Training inside partitions with real Ray and real torch: two jobs at once,
hooks around every worker (in order, denying, setting a protected variable,
asking for a retry), a worker killed mid-run.

A fit costs 40-50 s on two cores whatever it trains, so the fits run once per
module, in two drivers (two jobs at once; the rest one after another in one
driver, `drivers.TRAIN_JOBS`), and each test checks one thing of their results.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ray_accel.core.visibility import parse_visible_ids
from tests.integration import drivers
from tests.integration.cluster_harness import Cluster

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def cluster(trn1_cluster: Cluster) -> Cluster:
    return trn1_cluster


def ranks(out: Path) -> list[dict[str, Any]]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def events(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def check_job(out: Path, partition_cores: set[int]) -> None:
    r0, r1 = ranks(out)
    for r in (r0, r1):
        assert r["local_rank"] in (0, 1) and r["local_world_size"] == 2 and r["node_rank"] == 0
        assert r["env"]["LOCAL_RANK"] == str(r["local_rank"]) and r["env"]["LOCAL_WORLD_SIZE"] == "2"
        assert r["losses"][-1] < r["losses"][0] / 10, "the loss goes down"
    assert {r0["local_rank"], r1["local_rank"]} == {0, 1}
    for r in (r0, r1):
        # The mock is a Neuron host: a NeuronCore belongs to one process, so
        # each worker sees exactly the cores Ray granted it (as a range).
        assert parse_visible_ids(r["visible"]) == sorted(int(i) for i in r["own_ids"]), r
    assert not {int(i) for i in r0["own_ids"]} & {int(i) for i in r1["own_ids"]}, "no core seen by two workers"
    assert {int(i) for r in (r0, r1) for i in r["own_ids"]} <= partition_cores
    assert r0["weights"] == r1["weights"], "identical weights on both ranks"


@pytest.fixture(scope="module")
def two_jobs(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    """One job in each partition at the same time; p0's has a recording hook."""
    tmp = tmp_path_factory.mktemp("two-jobs")
    kws = {
        "p0": {"partition": "p0", "out": str(tmp / "p0"), "recording": [{"log": str(tmp / "hooks.log")}]},
        "p1": {"partition": "p1", "out": str(tmp / "p1")},
    }
    results = cluster.drivers(drivers.TRAIN_JOB, [[json.dumps(kw)] for kw in kws.values()], timeout=400)
    return tmp, dict(zip(kws, results, strict=True))


@pytest.fixture(scope="module")
def sequential(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    """The fits that end early or fail on purpose, one after another in one driver."""
    tmp = tmp_path_factory.mktemp("fits")
    kws: dict[str, dict[str, Any]] = {
        "denied": {
            "partition": "p1", "out": str(tmp / "denied"),
            "recording": [{"log": str(tmp / "denied.log"), "deny": "quota exhausted"}],
        },
        # A hook may not set a rank, collective or visibility variable; the
        # visibility variable here (tests/unit/test_train_protected.py refuses
        # each of the others on the same path, `HookRun.pre_create` with the
        # worker's protected set, without a fit per variable).
        "protected": {
            "partition": "p0", "out": str(tmp / "protected"), "steps": 3,
            "recording": [{"log": str(tmp / "protected.log")}],
            "sets_env": [{"name": "NEURON_RT_VISIBLE_CORES", "value": "0-31"}],
        },
        "retried": {
            "partition": "p1", "out": str(tmp / "retried"), "steps": 5, "max_failures": 1,
            "recording": [{"log": str(tmp / "retried.log"), "retry_marker": str(tmp / "retried.marker")}],
        },
        "retry_refused": {
            "partition": "p1", "out": str(tmp / "retry_refused"), "steps": 5, "max_failures": 0,
            "recording": [{"log": str(tmp / "retry_refused.log"), "retry_marker": str(tmp / "refused.marker")}],
        },
        "killed": {
            "partition": "p0", "out": str(tmp / "killed"), "max_failures": 1,
            "die_once_marker": str(tmp / "died"), "recording": [{"log": str(tmp / "killed.log")}],
        },
    }  # fmt: skip
    results: dict[str, dict[str, Any]] = cluster.driver(drivers.TRAIN_JOBS, json.dumps(kws), timeout=900)
    return tmp, results


def test_two_jobs_in_two_partitions_at_once(cluster: Cluster, two_jobs: tuple[Path, dict[str, Any]]) -> None:
    tmp, results = two_jobs
    cores = {p["partition"]: set(p["core_ids"]) for p in cluster.status["partitions"]}
    for part, result in results.items():
        assert result["ok"], result
        check_job(tmp / part, cores[part])
        assert {r["partition"] for r in ranks(tmp / part)} == {part}


def test_hooks_run_in_order_with_matching_counts(two_jobs: tuple[Path, dict[str, Any]]) -> None:
    tmp, results = two_jobs
    assert results["p0"]["ok"], results["p0"]
    per_workload: dict[str, list[str]] = {}
    for e in events(tmp / "hooks.log"):
        per_workload.setdefault(e["workload"], []).append(e["event"])
    assert len(per_workload) == 2
    for seq in per_workload.values():
        assert seq == ["pre_create", "post_create", "pre_terminate", "post_terminate"]
    r0, r1 = ranks(tmp / "p0")
    assert r0["hook_env"] == r1["hook_env"] == "granted", "pre_create's env vars reach the worker"
    assert r0["resource_file"] and r0["resource_file"].endswith(".resources")
    assert not Path(r0["resource_file"]).exists(), "the per-workload resource file is removed after the run"
    assert ranks(tmp / "p1")[0]["hook_env"] is None, "the other job, without the hook, never saw it"


def test_denying_hook_fails_fit_with_its_reason(sequential: tuple[Path, dict[str, Any]]) -> None:
    tmp, results = sequential
    result = results["denied"]
    assert not result["ok"]
    assert "hook Recording denied workload" in result["error"] and "quota exhausted" in result["error"]
    counts = Counter(e["event"] for e in events(tmp / "denied.log"))
    assert counts["pre_create"] == counts["post_terminate"] == 2
    assert counts["post_create"] == 0
    assert not (tmp / "denied" / "rank0.json").exists(), "training never started"


def test_hook_setting_a_runtime_variable_fails_the_run(sequential: tuple[Path, dict[str, Any]]) -> None:
    tmp, results = sequential
    result = results["protected"]
    assert not result["ok"], result
    # Ray Train V2 wraps the refusal in its ControllerError; the reason is ours.
    assert "hook SetsEnv " in result["error"] and "NEURON_RT_VISIBLE_CORES" in result["error"], result["error"]
    assert not (tmp / "protected" / "rank0.json").exists(), "training never started"
    counts = Counter(e["event"] for e in events(tmp / "protected.log"))
    assert counts["pre_create"] == counts["post_terminate"] == 2, counts
    assert counts["post_create"] == 0


def test_a_worker_that_cannot_load_its_backend_fails_the_fit_at_start_naming_why(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A worker loads the backend its raylet's bridge spec names; where that
    backend is not installed the job fails at start, naming the backend and
    the reason, instead of training on gloo without a word."""
    kw = {"partition": "p1", "out": str(tmp_path / "out"), "steps": 3, "backend_name": "acme-not-installed"}
    result = cluster.driver(drivers.TRAIN_JOB_BACKEND_MISSING, json.dumps(kw), timeout=400)
    assert not result["ok"], result
    assert "cannot load its raylet's backend: backend 'acme-not-installed' is not installed here" in result["error"]
    assert not (tmp_path / "out" / "rank0.json").exists(), "training never started"


def test_retry_request_counts_as_a_worker_failure(sequential: tuple[Path, dict[str, Any]]) -> None:
    tmp, results = sequential
    assert results["retried"]["ok"], results["retried"]
    assert (tmp / "retried.marker").exists()
    counts = Counter(e["event"] for e in events(tmp / "retried.log"))
    assert counts["pre_create"] == counts["post_terminate"] == 4, counts
    refused = results["retry_refused"]
    assert not refused["ok"] and "asked to retry" in refused["error"], refused


def test_killed_worker_restarts_and_hook_counts_reconcile(
    cluster: Cluster, sequential: tuple[Path, dict[str, Any]]
) -> None:
    tmp, results = sequential
    assert results["killed"]["ok"], results["killed"]
    marker = tmp / "died"
    assert marker.exists(), "a worker was killed mid-run"
    evs = events(tmp / "killed.log")
    counts = Counter(e["event"] for e in evs)
    assert counts["pre_create"] == counts["post_terminate"] == 4, counts
    killed_pid = int(marker.read_text())
    killed = [e for e in evs if e["pid"] == killed_pid]
    assert [e["event"] for e in killed] == ["pre_create", "post_create"], (
        "the killed worker never ran its own terminate hooks"
    )
    reconciled = [e for e in evs if e["event"] == "post_terminate" and e["workload"] == killed[0]["workload"]]
    assert len(reconciled) == 1 and reconciled[0]["pid"] != killed_pid, "another worker ran its post_terminate"
    check_job(tmp / "killed", set(cluster.part("p0")["core_ids"]))
