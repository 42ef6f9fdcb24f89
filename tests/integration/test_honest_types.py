"""Honest accelerator types and the CUDA process environment on real Ray 2.60.

Mock hardware `mixed-v100-a100` (one V100, two A100s; the shape of Ray's own
NVML test data). Here we deliberately differ from Ray: Ray 2.60 types a node
by its GPU 0 (`NvidiaGPUAcceleratorManager.get_current_node_accelerator_type`
reads handle 0 only; Ray's `test_gpu_info_parsing` in
python/ray/tests/accelerators/test_nvidia_gpu.py expects one type for a node of
A100s and a V100), so on this host it would advertise `accelerator_type:V100`
and a task asking for an A100 would never land. We check Ray's own view
(`ray.nodes()`: resources and labels per partition, where tasks land), not ours.

Also: `CUDA_DEVICE_ORDER=PCI_BUS_ID` reaches every worker of a GPU partition's
raylet, a plain task's included, not only training workers (masks are NVML
indexes; CUDA's default order is fastest-first).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ray_accel.cluster.host import free_port
from tests.cli_process import repo_pythonpath, run_cli
from tests.integration.cluster_harness import Cluster

pytestmark = pytest.mark.ray

MIXED = "mixed-v100-a100"
TYPE_KEY = "ray.io/accelerator-type"
OUR_TYPE_KEY = "ray-accel.io/accelerator-type"
PARTITION_KEY = "ray-accel.io/partition"

RAY_VIEW = r"""
import json, os, sys
import ray
ray.init(address=sys.argv[1], log_to_driver=False)
parts = sys.argv[2].split(",")
nodes = {n["Labels"]["ray-accel.io/partition"]: {"labels": n["Labels"], "resources": n["Resources"]}
         for n in ray.nodes() if n["Alive"] and "ray-accel.io/partition" in n["Labels"]}  # not the head raylet

def seen():
    return {"partition": os.environ.get("RAYACCEL_PARTITION"), "order": os.environ.get("CUDA_DEVICE_ORDER"),
            "cvd": os.environ.get("CUDA_VISIBLE_DEVICES")}

plain = ray.remote(num_cpus=0)(seen)
gpu = ray.remote(num_gpus=1, num_cpus=0)(seen)
out = {"nodes": nodes,
       "plain": ray.get([plain.options(label_selector={"ray-accel.io/partition": p}).remote() for p in parts]),
       "gpu": ray.get([gpu.options(label_selector={"ray-accel.io/partition": p}).remote() for p in parts]),
       "typed": {}}
for kind in sys.argv[3].split(",") if sys.argv[3] else []:
    ref = gpu.options(accelerator_type=kind).remote()
    ready, _ = ray.wait([ref], timeout=60)
    out["typed"][kind] = ray.get(ready[0])["partition"] if ready else None
    if not ready:
        ray.cancel(ref, force=True)
print(json.dumps(out))
"""


def start(tmp: Path, *args: str) -> tuple[Cluster, str]:
    env = {"RAYACCEL_MOCK": MIXED, "RAYACCEL_STATE_DIR": str(tmp / "state"), "PYTHONPATH": repo_pythonpath()}
    # Ray's view of resources and labels is what is checked: no dashboard, no metrics.
    base = ("start", "--head", "--port", str(free_port()), "--no-dashboard", "--no-metrics", "--json")
    proc = run_cli(*base, *args, env=env, timeout=300)
    if proc.returncode != 0:
        run_cli("stop", "--grace", "2", env=env)
        pytest.fail(f"ray-accel start failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return Cluster(env, json.loads(proc.stdout)), proc.stderr


def ray_view(cluster: Cluster, kinds: str) -> Any:
    parts = ",".join(p["partition"] for p in cluster.status["partitions"])
    return cluster.driver(RAY_VIEW, parts, kinds)


def test_auto_split_partitions_advertise_their_own_model_in_rays_view(tmp_path: Path) -> None:
    cluster, _ = start(tmp_path)
    try:
        assert [(p["partition"], p["accelerator_type"]) for p in cluster.status["partitions"]] == [
            ("p0", "V100"),
            ("p1", "A100"),
        ]
        view = ray_view(cluster, "A100,V100")
    finally:
        cluster.cli("stop", "--grace", "2")
    nodes = view["nodes"]
    assert set(nodes) == {"p0", "p1"}
    for part, kind, other, gpus in (("p0", "V100", "A100", 1), ("p1", "A100", "V100", 2)):
        resources, labels = nodes[part]["resources"], nodes[part]["labels"]
        assert resources["GPU"] == gpus
        assert resources.get(f"accelerator_type:{kind}") == 1, resources
        assert f"accelerator_type:{other}" not in resources, "Ray 2.60 would type every partition by GPU 0"
        assert labels[TYPE_KEY] == kind and labels[OUR_TYPE_KEY] == kind
    # Work that asks for a model lands where that model is.
    assert view["typed"] == {"A100": "p1", "V100": "p0"}
    # Every worker, a plain task's too, numbers GPUs in NVML's (PCI bus) order.
    for task in view["plain"] + view["gpu"]:
        assert task["order"] == "PCI_BUS_ID", task
    assert sorted(t["partition"] for t in view["plain"]) == ["p0", "p1"]
    assert {t["partition"]: t["cvd"] for t in view["gpu"]}["p0"] == "0"


def test_shared_over_mixed_models_advertises_no_type(tmp_path: Path) -> None:
    cluster, progress = start(tmp_path, "--mode", "shared", "--partitions", "2")
    try:
        view = ray_view(cluster, "")
        status = cluster.refresh()
    finally:
        cluster.cli("stop", "--grace", "2")
    assert "no single accelerator type" in progress and "Tesla V100-SXM2-16GB" in progress
    assert "NVIDIA A100-SXM4-40GB" in progress
    for part in ("p0", "p1"):
        resources, labels = view["nodes"][part]["resources"], view["nodes"][part]["labels"]
        assert resources["GPU"] == 3
        assert not [k for k in resources if k.startswith("accelerator_type:")], resources
        assert TYPE_KEY not in labels and OUR_TYPE_KEY not in labels
    for p in status["partitions"]:
        assert p["accelerator_type"] is None
        assert p["models"] == ["Tesla V100-SXM2-16GB", "NVIDIA A100-SXM4-40GB"], "each model stays visible"
    assert all(t["order"] == "PCI_BUS_ID" for t in view["plain"])


def test_init_on_a_partition_of_one_model_advertises_that_model(tmp_path: Path) -> None:
    """`ray_accel.init` starts its own raylet: it too carries the type of the
    devices it gets, and the process environment."""
    script = r"""
import json, os
import ray, ray_accel
ray_accel.init(partition="1-2", address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)

@ray.remote(num_cpus=0)
def order():
    return os.environ.get("CUDA_DEVICE_ORDER")

print(json.dumps({"types": sorted(k for k in ray.cluster_resources() if k.startswith("accelerator_type:")),
                  "gpus": ray.cluster_resources().get("GPU"), "order": ray.get(order.remote())}))
ray.shutdown()
"""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAYACCEL_")}
    env.update({"RAYACCEL_MOCK": MIXED, "PYTHONPATH": repo_pythonpath()})
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"types": ["accelerator_type:A100"], "gpus": 2, "order": "PCI_BUS_ID"}
