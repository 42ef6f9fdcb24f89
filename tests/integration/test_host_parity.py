"""A partitioned host on real Ray with mock hardware: what each raylet is
given (labels, the dashboard, host figures, NUMA pinning, an inherited mask,
explicit resources where Ray is untested), seen through Ray's own views
(`ray list nodes`, `ray.util.state`, `ray job submit`, `ray.nodes()`, `ray status`).

Ray's upstream tests are the reference for intent: `python/ray/tests/
accelerators/test_neuron.py` (a mask in the environment bounds the cores a
node registers, a request above it is refused) and the state-API tests
(`python/ray/tests/test_state_api.py`: `list_nodes` shows every node with its
labels and resources). Here every partition is such a node.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from ray_accel.cluster.host import HEAD_SHARE, free_port
from tests.cli_process import repo_pythonpath, run_cli
from tests.clirun import run_cli_here
from tests.integration.cluster_harness import Cluster

pytestmark = pytest.mark.ray

BIN = Path(sys.executable).parent

# One task per partition, chosen by label selector; each reports where it ran.
PER_PARTITION = r"""
import json, os, sys
import ray
ray.init(address=sys.argv[1] if len(sys.argv) > 1 else None, log_to_driver=False)
parts = sorted({n["Labels"]["ray-accel.io/partition"] for n in ray.nodes()
                if n["Alive"] and "ray-accel.io/partition" in n["Labels"]})  # not the head raylet

@ray.remote(resources={"neuron_cores": 1}, num_cpus=0)
def where(part):
    return {"part": part, "node": ray.get_runtime_context().get_node_id(),
            "cores": os.environ.get("NEURON_RT_VISIBLE_CORES"), "affinity": sorted(os.sched_getaffinity(0)),
            "preload": os.environ.get("RAY_preload_python_modules")}

refs = [where.options(label_selector={"ray-accel.io/partition": p}).remote(p) for p in parts]
print("RESULT " + json.dumps(ray.get(refs, timeout=120)))
"""

STATE_VIEWS = r"""
import json, sys
import ray
from ray.util.state import list_nodes
ray.init(address=sys.argv[1], log_to_driver=False)
nodes = [n for n in ray.nodes() if n["Alive"]]
# Named, as a user on a machine running several clusters must (Ray refuses to guess).
state = list_nodes(address=sys.argv[1], detail=True)
print(json.dumps({
    "nodes": [{"id": n["NodeID"], "labels": n["Labels"], "resources": n["Resources"]} for n in nodes],
    "state": [{"id": s.node_id, "labels": s.labels, "resources": s.resources_total, "state": s.state} for s in state],
}))
"""


def start(tmp: Path, preset: str, *args: str, env: dict[str, str] | None = None) -> Cluster:
    full = {
        "RAYACCEL_MOCK": preset,
        "RAYACCEL_STATE_DIR": str(tmp / "state"),
        "PYTHONPATH": repo_pythonpath(),
        **(env or {}),
    }
    proc = run_cli("start", "--head", "--port", str(free_port()), "--json", *args, env=full, timeout=300)
    if proc.returncode != 0:
        run_cli("stop", "--grace", "2", env=full)
        pytest.fail(f"ray-accel start failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return Cluster(full, json.loads(proc.stdout), proc.stderr)


def stop(cluster: Cluster) -> None:
    proc = cluster.cli("stop", "--grace", "2", "--json")
    assert proc.returncode == 0, proc.stderr


def ray_env(cluster: Cluster) -> dict[str, str]:
    """A user's shell after `ray-accel start`: the driver environment that
    `status --json` prints, and Ray's usual RAY_ADDRESS."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAYACCEL_")}
    env.update(cluster.status["env"], RAY_ADDRESS=cluster.address, PYTHONPATH=repo_pythonpath())
    return env


def record(cluster: Cluster) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((Path(cluster.env["RAYACCEL_STATE_DIR"]) / "host.json").read_text())
    return data


def per_partition(cluster: Cluster) -> list[dict[str, Any]]:
    """PER_PARTITION run as a driver of the cluster."""
    proc = subprocess.run(
        [sys.executable, "-c", PER_PARTITION, cluster.address],
        env=ray_env(cluster),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    result: list[dict[str, Any]] = json.loads(line.removeprefix("RESULT "))
    return result


def host_cpus() -> int:
    import ray._private.utils as ray_utils

    return int(ray_utils.get_num_cpus())


@pytest.fixture(scope="module")
def labelled(trn1_cluster: Cluster) -> Cluster:
    """The shared cluster (tests.clusters.TRN1): two partitions, the user's
    labels `team=ml,example.com/zone=a` and the host resource `license: 3`."""
    return trn1_cluster


def test_dashboard_is_on_at_the_heads_port_block(labelled: Cluster) -> None:
    status = labelled.refresh()
    head = record(labelled)["head_raylet"]
    assert status["dashboard_address"] == f"http://127.0.0.1:{head['ports']['named']['dashboard_port']}"
    assert any(r["kind"] == "dashboard" for r in head["processes"]), "the head runs Ray's dashboard"
    text = labelled.cli("status")
    assert f"dashboard: {status['dashboard_address']}" in text.stdout


def test_ray_list_nodes_shows_every_partition_with_its_labels(labelled: Cluster) -> None:
    proc = subprocess.run(
        [str(BIN / "ray"), "list", "nodes", "--format", "json", "--detail"],
        env=ray_env(labelled),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    nodes = json.loads(proc.stdout)
    alive = [n for n in nodes if n["state"] == "ALIVE"]
    by_part = {n["labels"]["ray-accel.io/partition"]: n for n in alive if "ray-accel.io/partition" in n["labels"]}
    assert len(alive) == 3, "the partitions and the head raylet"
    assert set(by_part) == {"p0", "p1"}
    for n in by_part.values():
        assert n["labels"]["team"] == "ml" and n["labels"]["example.com/zone"] == "a"
        assert n["labels"]["ray-accel.io/accelerator-type"] == "Trainium"
        assert n["resources_total"]["neuron_cores"] == 16


def test_state_api_and_ray_nodes_count_the_host_once(labelled: Cluster) -> None:
    out = labelled.driver(STATE_VIEWS)
    ids = {p["node_id"] for p in labelled.status["partitions"]}
    head = labelled.status["head"]["node_id"]
    assert {s["id"] for s in out["state"] if s["state"] == "ALIVE"} == {*ids, head}
    for s in out["state"]:
        assert s["labels"]["team"] == "ml"
        assert s["labels"].get("ray-accel.io/partition") in ((None,) if s["id"] == head else ("p0", "p1"))
    (head_node,) = [n for n in out["nodes"] if n["id"] == head]
    assert not head_node["resources"].get("CPU") and not head_node["resources"].get("neuron_cores"), (
        "no CPUs, no devices"
    )
    nodes = [n for n in out["nodes"] if n["id"] != head]
    assert {n["id"] for n in nodes} == ids
    total = {k: sum(n["resources"].get(k, 0) for n in nodes) for k in ("CPU", "memory", "object_store_memory")}
    assert total["CPU"] == host_cpus(), "CPUs over all partitions equal the host's"
    assert total["memory"] + total["object_store_memory"] <= psutil.virtual_memory().total
    stores = sorted(n["resources"]["object_store_memory"] for n in nodes)
    assert stores[0] > 2 * 1024**3 or psutil.virtual_memory().total < 16 * 1024**3, "no fixed 2 GiB cap"
    assert sorted(n["resources"].get("license", 0) for n in nodes) == [1, 2], "the host's 3, divided"
    status = subprocess.run(
        [str(BIN / "ray"), "status", "--address", labelled.address],
        env=ray_env(labelled),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr[-2000:]
    assert f"/{host_cpus()}.0 CPU" in status.stdout and "/3.0 license" in status.stdout


# One task per partition prints a line of its own; the driver keeps Ray's log
# deduplication off, so a line sent twice shows twice.
PRINTS = r"""
import sys, time
import ray
ray.init(address=sys.argv[1])
parts = sorted({n["Labels"]["ray-accel.io/partition"] for n in ray.nodes()
                if n["Alive"] and "ray-accel.io/partition" in n["Labels"]})

@ray.remote(num_cpus=0)
def say(part):
    print(f"printed-in-{part}", flush=True)

ray.get([say.options(label_selector={"ray-accel.io/partition": p}).remote(p) for p in parts], timeout=120)
time.sleep(3)  # Ray's log monitors poll the logs folder; every copy has arrived by then
print("PARTS " + " ".join(parts))
"""


def test_a_workers_line_reaches_its_driver_once(labelled: Cluster) -> None:
    # Ray asks for one log monitor per host (`ray start --help`,
    # --include-log-monitor): the host's raylets share one logs folder, and
    # each monitor sends every line in it.
    proc = subprocess.run(
        [sys.executable, "-c", PRINTS, labelled.address],
        env={**ray_env(labelled), "RAY_DEDUP_LOGS": "0"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    parts = next(ln for ln in proc.stdout.splitlines() if ln.startswith("PARTS ")).split()[1:]
    assert parts == ["p0", "p1"]
    seen = {p: sum(f"printed-in-{p}" in ln for ln in out.splitlines()) for p in parts}
    assert seen == {"p0": 1, "p1": 1}, out[-3000:]
    monitors = [
        proc
        for entry in [record(labelled)["head_raylet"], *record(labelled)["partitions"]]
        for proc in entry["processes"]
        if proc["kind"] == "log_monitor"
    ]
    assert len(monitors) == 1 and monitors[0] in record(labelled)["head_raylet"]["processes"], monitors


def test_job_submit_runs_one_task_per_partition_by_label(labelled: Cluster, tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(PER_PARTITION)
    proc = subprocess.run(
        [
            str(BIN / "ray"),
            "job",
            "submit",
            "--address",
            labelled.status["dashboard_address"],
            "--working-dir",
            str(tmp_path),
            "--",
            # This venv's interpreter: the job's `python` is whatever PATH finds.
            sys.executable,
            "job.py",
        ],
        env=ray_env(labelled),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    results = json.loads(line.removeprefix("RESULT "))
    parts = {p["partition"]: p for p in labelled.status["partitions"]}
    assert sorted(r["part"] for r in results) == ["p0", "p1"]
    for r in results:
        assert r["node"] == parts[r["part"]]["node_id"]
        assert int(r["cores"]) in parts[r["part"]]["core_ids"]


def numa_tree(root: Path) -> Path:
    """Two NUMA nodes mapped onto this machine's real CPUs 0 and 1, laid out as
    Linux does (kernel Documentation/ABI/stable/sysfs-devices-node)."""
    for node, cpus in ((0, "0"), (1, "1")):
        (root / f"node{node}").mkdir(parents=True)
        (root / f"node{node}" / "cpulist").write_text(cpus + "\n")
    (root / "online").write_text("0-1\n")
    return root


TWO_CPUS = len(os.sched_getaffinity(0)) >= 2 and {0, 1} <= os.sched_getaffinity(0)
FIGURES = ["--", "--num-cpus", "4", "--memory", "2000000000", "--object-store-memory", "400000000"]
# Only what `ray.nodes()` says (the state API needs the dashboard, which this cluster runs without):
# the partitions' raylets, not the head's (Ray's smallest object store, out of the host's figures).
NODES_VIEW = r"""
import json, sys
import ray
ray.init(address=sys.argv[1], log_to_driver=False)
print(json.dumps([{"id": n["NodeID"], "resources": n["Resources"]} for n in ray.nodes()
                  if n["Alive"] and "ray-accel.io/partition" in n["Labels"]]))
"""


@pytest.fixture(scope="module")
def pinned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, dict[str, str]]]:
    """Two partitions on two NUMA nodes (CPUs 0 and 1, where this machine has
    them), the user's host figures, and neither the dashboard nor metrics."""
    tmp = tmp_path_factory.mktemp("numa")
    env = {"RAYACCEL_NUMA_ROOT": str(numa_tree(tmp / "numa"))} if TWO_CPUS else {}
    cluster = start(tmp, "trn1.32xlarge", "--partitions", "2", "--no-metrics", "--no-dashboard", *FIGURES, env=env)
    try:
        yield cluster, env
    finally:
        stop(cluster)


def test_no_dashboard_turns_it_off(pinned: tuple[Cluster, dict[str, str]]) -> None:
    cluster, _ = pinned
    assert cluster.status["dashboard_address"] is None
    head = record(cluster)["head_raylet"]
    # Ray 2.60 still runs its API-server process, with its usage-stats
    # module only and no frontend: no state API, no jobs
    # (ray/_private/services.py, start_api_server with include_dashboard=False).
    api = [psutil.Process(r["pid"]).cmdline() for r in head["processes"] if r["kind"] == "dashboard"]
    assert api and all("--modules-to-load=UsageStatsHead" in cmd and "--disable-frontend" in cmd for cmd in api), api
    assert "dashboard:" not in cluster.cli("status").stdout


@pytest.mark.skipif(not TWO_CPUS, reason="needs CPUs 0, 1")
def test_numa_pinning_and_the_users_host_figures(pinned: tuple[Cluster, dict[str, str]]) -> None:
    cluster, env = pinned
    # Mock trn1.32xlarge: devices 0-7 on NUMA node 0, 8-15 on node 1 (two per node, as the instance has).
    planned = run_cli_here("plan", "--partitions", "2", "--json", env={**env, "RAYACCEL_MOCK": "trn1.32xlarge"})
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert plan["cpu_pinning"] == "on"
    assert [p["cpu_set"] for p in plan["partitions"]] == [[0], [1]]
    status = cluster.refresh()
    assert status["cpu_pinning"] == "on"
    assert {p["partition"]: p["cpu_set"] for p in status["partitions"]} == {"p0": [0], "p1": [1]}
    for p in status["partitions"]:
        assert psutil.Process(p["pid"]).cpu_affinity() == p["cpu_set"], "the raylet runs on its NUMA node's CPUs"
        assert p["total"]["CPU"] == 2, "the user's 4 host CPUs, divided"
    out = per_partition(cluster)
    assert {r["part"]: r["affinity"] for r in out} == {"p0": [0], "p1": [1]}, "each worker's sched_getaffinity"
    nodes = cluster.driver(NODES_VIEW)
    assert sum(n["resources"]["memory"] for n in nodes) == 2_000_000_000
    # The head raylet's object store came out of the host's 400 MB first.
    assert sum(n["resources"]["object_store_memory"] for n in nodes) == 400_000_000 - HEAD_SHARE.object_store_memory
    assert "CPU SET" in cluster.cli("status").stdout


def test_inherited_mask_bounds_the_partitions(tmp_path: Path) -> None:
    cluster = start(
        tmp_path, "trn1.32xlarge", "--partitions", "2", "--no-metrics", "--no-dashboard",
        env={"NEURON_RT_VISIBLE_CORES": "8-23"},
    )  # fmt: skip
    try:
        parts = {p["partition"]: p["core_ids"] for p in cluster.status["partitions"]}
        assert parts == {"p0": list(range(8, 16)), "p1": list(range(16, 24))}
        assert cluster.status["inherited_mask"]["value"] == "8-23"
        out = per_partition(cluster)
        for r in out:
            assert int(r["cores"]) in parts[r["part"]]
    finally:
        stop(cluster)


def test_untested_ray_version_still_starts_with_explicit_resources(tmp_path: Path) -> None:
    # The test seam makes check_ray_version report another version (test only).
    env = {"RAYACCEL_TEST_FAKE_RAY_VERSION": "2.99.0"}
    cluster = start(tmp_path, "trn1.32xlarge", "--partitions", "2", "--no-metrics", "--no-dashboard", env=env)
    try:
        log = cluster.start_log
        assert "ray 2.99.0 is outside" in log and "explicit resources and masks" in log and "Lost:" in log
        assert all(p["alive"] and p["registered"] for p in cluster.refresh()["partitions"])
        assert [p["total"]["neuron_cores"] for p in cluster.status["partitions"]] == [16, 16]
        out = per_partition(cluster)
        parts = {p["partition"]: p["core_ids"] for p in cluster.status["partitions"]}
        for r in out:
            assert int(r["cores"]) in parts[r["part"]], "Ray's own manager masks within the partition"
            assert "ray_accel" not in (r["preload"] or ""), "no bridge in the workers"
    finally:
        stop(cluster)


INIT_FALLBACK = r"""
import json
import ray, ray_accel
ray_accel.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
print(json.dumps({"neuron_cores": ray.cluster_resources().get("neuron_cores")}))
ray.shutdown()
"""


def test_init_on_an_untested_ray_gets_explicit_resources_and_masks(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAYACCEL_", "NEURON_RT_", "RAY_"))}
    env.update(
        RAYACCEL_MOCK="trn1.32xlarge",
        RAYACCEL_TEST_FAKE_RAY_VERSION="2.99.0",
        NEURON_RT_VISIBLE_CORES="4-9",
        PYTHONPATH=repo_pythonpath(),
    )
    proc = subprocess.run([sys.executable, "-c", INIT_FALLBACK], env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Ray's own Neuron manager would read "4-9" as one core; the fallback hands it a comma list and the count.
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"neuron_cores": 6.0}
    assert "explicit resources and masks" in proc.stderr and "Lost:" in proc.stderr
