"""Issue 15 placement acceptance with real Ray and real torch: jobs placed by a
policy from the cluster's live resources, through the ScalingConfig the
builder makes, on a mock trn1.32xlarge split into 4 partitions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ray_accel.core.visibility import parse_visible_ids
from tests.integration.conftest import Cluster, start_cluster

pytestmark = pytest.mark.ray

# Three jobs submitted at once, placed together with `pack`, each a
# TorchTrainer with AcceleratorTorchConfig, run at the same time (Ray Train
# V2 runs fit() outside the main thread, as Tune does).
THREE_JOBS = r"""
import json, sys, threading
from pathlib import Path
import ray, ray_accel
from ray.train import RunConfig
from ray.train.torch import TorchTrainer
from examples.train_partitions import train_loop
from ray_accel.placement import new_job, read_view, scaling_configs
from ray_accel.train import AcceleratorTorchConfig

ray_accel.init(address=sys.argv[1], log_to_driver=False)
out = Path(sys.argv[2])
view = read_view()
jobs = [new_job(2, 8, view, name="a16", job_id="a16"),
        new_job(1, 8, view, name="b8", job_id="b8"),
        new_job(1, 8, view, name="c8", job_id="c8")]
placed = scaling_configs(jobs, "pack", view)
results = {}

def fit(job_id):
    assignment, scaling = placed[job_id]
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"steps": 5, "out": str(out / job_id)},
        torch_config=AcceleratorTorchConfig(),
        scaling_config=scaling,
        run_config=RunConfig(name=f"placement-{job_id}", storage_path=str(out / "ray_results")),
    )
    try:
        trainer.fit()
        results[job_id] = {"ok": True}
    except Exception as e:
        results[job_id] = {"ok": False, "error": f"{type(e).__name__}: {e}"}

threads = [threading.Thread(target=fit, args=(j.id,)) for j in jobs]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({
    "results": results,
    "placed": {k: {"selectors": sc.label_selector, "resources": sc.resources_per_worker,
                   "connected": a.connected, "aligned": a.aligned} for k, (a, sc) in placed.items()},
    "partitions": [{"name": p.name, "devices": list(p.device_ids), "links": sorted(p.links)} for p in view.partitions],
}))
"""

# Acceptance 15.2: a job larger than the free devices fails before any worker
# starts, naming the largest size that fits now; once more with 4 cores of p1
# held by an actor.
TOO_BIG = r"""
import json, sys, time
import ray, ray_accel
from ray.util import placement_group_table
from ray_accel.placement import PlacementError, read_view, scaling_config

ray_accel.init(address=sys.argv[1], log_to_driver=False)

def attempt(workers, per):
    groups = len(placement_group_table())
    try:
        scaling_config(workers, per, name="too-big")
        return {"refused": False}
    except PlacementError as e:
        return {"refused": True, "message": str(e), "largest": e.largest_workers,
                "new_groups": len(placement_group_table()) - groups}

out = {"empty": attempt(5, 8)}

@ray.remote(num_cpus=0, resources={"neuron_cores": 4})
class Hold:
    def ping(self): return 1

h = Hold.options(label_selector={"ray-accel.io/partition": "p1"}).remote()
ray.get(h.ping.remote())
deadline = time.time() + 30
while read_view().partitions[1].free != 4 and time.time() < deadline:
    time.sleep(0.2)  # the GCS learns of the grant through the raylet's next report
out["held"] = attempt(4, 8)
out["fits"] = len(scaling_config(3, 8, name="fits").label_selector)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(tmp_path_factory.mktemp("placement"), "trn1.32xlarge", 4)
    try:
        yield c
    finally:
        c.cli("stop", "--grace", "2")


def ranks(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]


def test_three_jobs_packed_on_whole_linked_partitions_sharing_none(cluster: Cluster, tmp_path: Path) -> None:
    res = cluster.driver(THREE_JOBS, str(tmp_path), timeout=500)
    assert all(r["ok"] for r in res["results"].values()), res["results"]
    cores = {p["partition"]: set(p["core_ids"]) for p in cluster.status["partitions"]}
    links = {p["name"]: (set(p["devices"]), set(p["links"])) for p in res["partitions"]}
    owner: dict[str, str] = {}
    for job_id, want in (("a16", 2), ("b8", 1), ("c8", 1)):
        placed = res["placed"][job_id]
        assert placed["resources"] == {"neuron_cores": 8} and placed["connected"] and placed["aligned"]
        workers = ranks(tmp_path / job_id)
        assert len(workers) == want
        parts = [w["partition"] for w in workers]
        assert sorted(parts) == sorted(s["ray-accel.io/partition"] for s in placed["selectors"]), (
            "each worker ran where its selector sent it"
        )
        assert len(set(parts)) == want, "one worker per partition: 8 cores each fill it"
        for w in workers:
            ids = parse_visible_ids(w["visible"])
            assert ids == sorted(int(i) for i in w["own_ids"]) and set(ids) == cores[w["partition"]], (
                f"{job_id} worker holds its whole partition {w['partition']}: {w['visible']}"
            )
            assert ids == list(range(ids[0], ids[0] + 8)) and ids[0] % 8 == 0, "aligned, contiguous"
            assert w["partition"] not in owner, f"{w['partition']} shared by {owner.get(w['partition'])} and {job_id}"
            owner[w["partition"]] = job_id
        if want == 2:
            _, links0 = links[parts[0]]
            devices1, _ = links[parts[1]]
            assert links0 & devices1, f"the 16-core job's partitions {parts} are linked on the torus"
        assert workers[0]["losses"][-1] < workers[0]["losses"][0], "the job trained"
    assert sorted(owner) == ["p0", "p1", "p2", "p3"]


def test_a_job_larger_than_the_free_devices_fails_before_any_worker_starts(cluster: Cluster) -> None:
    res = cluster.driver(TOO_BIG, timeout=300)
    empty, held = res["empty"], res["held"]
    assert empty["refused"] and empty["largest"] == 4 and empty["new_groups"] == 0
    assert "job 'too-big' asks 5 worker(s) x 8 neuron_cores (40 in all)" in empty["message"]
    assert "the largest job of 8 neuron_cores per worker that fits is 4 worker(s) (32 neuron_cores)" in empty["message"]
    assert held["refused"] and held["largest"] == 3 and held["new_groups"] == 0
    assert "fits is 3 worker(s) (24 neuron_cores)" in held["message"] and "/p1 4/8" in held["message"]
    assert res["fits"] == 3, "the size it names does fit"
