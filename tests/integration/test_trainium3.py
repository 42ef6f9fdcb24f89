"""A Trainium3 host on real Ray 2.60: the mock `trn3.48xlarge` (16 devices x
4 logical cores, all to all) started as two partitions, a task in each.
One cluster start, without dashboard or metrics exporters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ray_accel.cluster.host import free_port
from tests.cli_process import repo_pythonpath, run_cli
from tests.integration.cluster_harness import Cluster

pytestmark = pytest.mark.ray

TASKS = r"""
import json, os, sys
import ray
ray.init(address=sys.argv[1], log_to_driver=False)
nodes = {n["Labels"].get("ray-accel.io/partition"): {"labels": n["Labels"], "resources": n["Resources"]}
         for n in ray.nodes() if n["Alive"]}

@ray.remote(num_cpus=0, resources={"neuron_cores": 4})
def where():
    return {"partition": ray.get_runtime_context().get_node_labels().get("ray-accel.io/partition"),
            "cores": os.environ.get("NEURON_RT_VISIBLE_CORES")}

parts = sys.argv[2].split(",")
tasks = ray.get([where.options(label_selector={"ray-accel.io/partition": p}).remote() for p in parts])
print(json.dumps({"nodes": nodes, "tasks": tasks}))
"""


def _cores(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


def test_a_trainium3_host_starts_two_partitions_and_runs_a_task_in_each(tmp_path: Path) -> None:
    env = {
        "RAYACCEL_MOCK": "trn3.48xlarge",
        "RAYACCEL_STATE_DIR": str(tmp_path / "state"),
        "PYTHONPATH": repo_pythonpath(),
    }
    args = (
        "start",
        "--head",
        "--partitions",
        "2",
        "--port",
        str(free_port()),
        "--no-dashboard",
        "--no-metrics",
        "--json",
    )
    proc = run_cli(*args, env=env, timeout=300)
    try:
        assert proc.returncode == 0, proc.stderr[-3000:]
        cluster = Cluster(env, json.loads(proc.stdout))
        status = cluster.refresh()
        view = cluster.driver(TASKS, "p0,p1")
    finally:
        run_cli("stop", "--grace", "2", env=env)
    parts = {p["partition"]: p for p in status["partitions"]}
    assert sorted(parts) == ["p0", "p1"]
    assert parts["p0"]["core_ids"] == list(range(32)) and parts["p1"]["core_ids"] == list(range(32, 64))
    for name in ("p0", "p1"):
        assert parts[name]["accelerator_type"] == "Trainium3"
        resources, labels = view["nodes"][name]["resources"], view["nodes"][name]["labels"]
        assert resources["neuron_cores"] == 32
        assert resources.get("accelerator_type:Trainium3") == 1, resources
        assert labels["ray-accel.io/accelerator-type"] == "Trainium3"
    by_part = {t["partition"]: _cores(t["cores"]) for t in view["tasks"]}
    assert sorted(by_part) == ["p0", "p1"]
    assert len(by_part["p0"]) == 4 and set(by_part["p0"]) <= set(range(32))
    assert len(by_part["p1"]) == 4 and set(by_part["p1"]) <= set(range(32, 64))
