"""Jobs with real Ray and real torch, on a mock
trn1.32xlarge split into 4 partitions of 8 NeuronCores: jobs placed by a
policy from the cluster's live resources (through the ScalingConfig the
builder makes), one refused before any worker starts, and every `fit()` with
AcceleratorTorchConfig a job in `ray-accel jobs` with phases derived from Ray
Train V2's controller states. One cluster and one run of the three packed
jobs serve the placement and the phase checks."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ray_accel.core.visibility import parse_visible_ids
from ray_accel.jobs import store
from ray_accel.jobs.model import PHASES
from tests.integration.cluster_harness import Cluster
from tests.integration.scrapes import scrape_all

pytestmark = pytest.mark.ray

PROLOGUE = r"""
import json, os, signal, sys, threading, time
from pathlib import Path
import ray, ray_accel
from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from ray_accel.jobs.model import job_json
from ray_accel.jobs.store import read_jobs
from ray_accel.train import AcceleratorTorchConfig
from tests.integration.jobs_loops import wait_then_train
from examples.hooks import Recording

ray_accel.init(address=sys.argv[1], log_to_driver=False)
out = Path(sys.argv[2])
results = {}

def fit(key, trainer):
    try:
        trainer.fit()
        results[key] = {"ok": True}
    except Exception as e:
        results[key] = {"ok": False, "error": f"{type(e).__name__}: {e}"}

def start(key, trainer):
    t = threading.Thread(target=fit, args=(key, trainer))
    t.start()
    return t

def job(job_id, timeout=240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = [job_json(j, replicas=True) for j in read_jobs() if j.id == job_id]
        yield found[0] if found else None
        time.sleep(0.3)
    raise TimeoutError(f"job {job_id} did not get there in {timeout}s")

def selectors(*parts):
    return [{"ray-accel.io/partition": p} for p in parts]
"""

# Three jobs submitted at once, placed with `pack`.
THREE_JOBS = (
    PROLOGUE
    + r"""
from examples.train_partitions import train_loop
from ray_accel.placement import new_job, read_view, scaling_configs

view = read_view()
jobs = [new_job(2, 8, view, name="a16", job_id="a16"),
        new_job(1, 8, view, name="b8", job_id="b8"),
        new_job(1, 8, view, name="c8", job_id="c8")]
placed = scaling_configs(jobs, "pack", view)
ids = {}
threads = []
for j in jobs:
    config = AcceleratorTorchConfig()
    ids[j.id] = config.run_id
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"steps": 3, "out": str(out / j.id)},
        torch_config=config,
        scaling_config=placed[j.id][1],
        run_config=RunConfig(name=f"jobs-{j.id}", storage_path=str(out / "ray_results")),
    )
    threads.append(start(j.id, trainer))
for t in threads: t.join()
ray.shutdown()  # nothing of Ray's printed after the result line
print(json.dumps({
    "results": results,
    "ids": ids,
    "placed": {k: {"selectors": sc.label_selector, "resources": sc.resources_per_worker,
                   "connected": a.connected, "aligned": a.aligned} for k, (a, sc) in placed.items()},
    "partitions": [{"name": p.name, "devices": list(p.device_ids), "links": sorted(p.links)} for p in view.partitions],
}))
"""
)

# The driver kills one worker, by the pid the job store
# reports, while the job runs; FailureConfig(max_failures=1).
KILL_ONE = (
    PROLOGUE
    + r"""
killed_marker = out / "killed"
config = AcceleratorTorchConfig(hooks=[Recording(str(out / "hooks.log"))])
trainer = TorchTrainer(
    wait_then_train,
    train_loop_config={"out": str(out), "wait_for": str(out / "never"), "skip_if": str(killed_marker),
                       "max_wait_s": 120, "steps": 3},
    torch_config=config,
    scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"neuron_cores": 8},
                                 label_selector=selectors("p0", "p1")),
    run_config=RunConfig(name="jobs-kill", storage_path=str(out / "ray_results"),
                         failure_config=FailureConfig(max_failures=1)),
)
t = start("kill", trainer)
for j in job(config.run_id):
    if j and j["phase"] == "Running" and (out / "ws2" / "rank1.json").exists():
        break
victim = next(r for r in j["replicas"] if r["world_rank"] == 1)
killed_marker.write_text(str(victim["pid"]))
os.kill(victim["pid"], signal.SIGKILL)
t.join()
ray.shutdown()  # nothing of Ray's printed after the result line
print(json.dumps({"results": results, "id": config.run_id, "killed": victim}))
"""
)

# An elastic (2, 4) job while p2 and p3 are held by another
# job; it grows to 4 when they are released. Ray Train's elastic policy sizes a
# run from the Autoscaling Coordinator's reservations, which count other Train
# runs but not plain tasks or actors (ray/data/_internal/cluster_autoscaler/
# default_autoscaling_coordinator.py in Ray 2.60, `get_reserved_resources`),
# so the holder is a Train run.
ELASTIC = (
    PROLOGUE
    + r"""
release = out / "release"
holder_config = AcceleratorTorchConfig()
holder = TorchTrainer(
    wait_then_train,
    train_loop_config={"out": str(out / "holder"), "wait_for": str(release), "max_wait_s": 200, "steps": 1},
    torch_config=holder_config,
    scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"neuron_cores": 8},
                                 label_selector=selectors("p2", "p3")),
    run_config=RunConfig(name="jobs-holder", storage_path=str(out / "ray_results")),
)
th = start("holder", holder)
for j in job(holder_config.run_id):
    if j and j["phase"] == "Running":
        break
config = AcceleratorTorchConfig(hooks=[Recording(str(out / "hooks.log"))])
elastic = TorchTrainer(
    wait_then_train,
    train_loop_config={"out": str(out / "elastic"), "wait_for": str(out / "never"), "wait_below": 4,
                       "max_wait_s": 200, "steps": 3},
    torch_config=config,
    scaling_config=ScalingConfig(num_workers=(2, 4), resources_per_worker={"neuron_cores": 8},
                                 label_selector=selectors("p0", "p1", "p2", "p3"),
                                 elastic_resize_monitor_interval_s=2.0),
    run_config=RunConfig(name="jobs-elastic", storage_path=str(out / "ray_results")),
)
te = start("elastic", elastic)
for j in job(config.run_id):
    if j and j["phase"] == "Running" and len(list((out / "elastic" / "ws2").glob("rank*.json"))) == 2:
        break
at_two = j
release.write_text("go")
th.join()
te.join()
ray.shutdown()  # nothing of Ray's printed after the result line
print(json.dumps({"results": results, "id": config.run_id, "holder": holder_config.run_id, "at_two": at_two}))
"""
)


# A job larger than the free devices fails before any worker
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
def cluster(trn1x4_cluster: Cluster) -> Cluster:
    """The shared four-partition cluster (tests.clusters.TRN1_X4), dashboard
    on: the job store asks Ray's state API whether a controller is alive."""
    return trn1x4_cluster


def cli_jobs(cluster: Cluster, *args: str) -> Any:
    proc = cluster.cli("jobs", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def phases(job: dict[str, Any]) -> list[str]:
    return [p["phase"] for p in job["phases"]]


def check_times(job: dict[str, Any]) -> None:
    times = [p["at"] for p in job["phases"]]
    assert times == sorted(times) and times[0] >= job["submitted_at"] - 1e-6, job["phases"]


def hook_counts(log: Path) -> Counter[str]:
    return Counter(json.loads(line)["event"] for line in log.read_text().splitlines())


def cores(cluster: Cluster) -> dict[str, set[int]]:
    return {p["partition"]: set(p["core_ids"]) for p in cluster.status["partitions"]}


def ranks(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]


@pytest.fixture(scope="module")
def three_jobs(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """The three packed jobs' run, once for its two tests: (the driver's result, its output folder)."""
    out = tmp_path_factory.mktemp("three-jobs")
    res = cluster.driver(THREE_JOBS, str(out), timeout=500)
    assert all(r["ok"] for r in res["results"].values()), res["results"]
    return res, out


def test_three_packed_jobs_each_go_pending_starting_running_succeeded(
    cluster: Cluster, three_jobs: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    res, _ = three_jobs
    listed = {j["id"]: j for j in cli_jobs(cluster)["jobs"]}
    (tmp_path / "jobs.json").write_text(json.dumps(listed, indent=2))
    held: dict[str, str] = {}
    for key, want in (("a16", 2), ("b8", 1), ("c8", 1)):
        job = listed[res["ids"][key]]
        assert job["name"] == f"jobs-{key}"
        assert phases(job) == ["Pending", "Starting", "Running", "Succeeded"], job["phases"]
        check_times(job)
        assert job["ray_state"] == "FINISHED" and job["restarts"] == 0 and job["attempts"] == 1
        assert job["workers"] == job["min_workers"] == job["max_workers"] == want
        assert len(job["partitions"]) == want and len(job["hosts"]) == 1
        for part in job["partitions"]:
            assert part not in held, f"{part} held by {held.get(part)} and {key}"
            held[part] = key
        shown = cli_jobs(cluster, "show", job["id"])
        for r in shown["replicas"]:
            assert phases(r) == ["Starting", "Running", "Succeeded"]
            assert {int(d) for d in r["devices"]} == cores(cluster)[r["partition"]], "a whole partition"
    assert len(held) == 4, "the three jobs hold the four partitions, none shared"
    text = cluster.cli("jobs")
    assert text.returncode == 0 and all(res["ids"][k] in text.stdout for k in ("a16", "b8", "c8"))
    top = cluster.cli("top", "--once", "--json")
    assert top.returncode == 0, top.stderr[-2000:]
    in_top = {j["id"]: j["phase"] for j in json.loads(top.stdout)["jobs"]}
    assert all(in_top[res["ids"][k]] == "Succeeded" for k in ("a16", "b8", "c8")), in_top
    unknown = cluster.cli("jobs", "show", "no-such-job")
    assert unknown.returncode == 2 and "'no-such-job'" in unknown.stderr
    # The gauge, on the metrics endpoint of the raylet holding the store
    # (Ray reports every 10 s by default; the store sets it every 5 s; a busy
    # 2-core machine can take several report periods).
    deadline = time.monotonic() + 120
    served = f"ray_{store.GAUGE_NAME}"  # as served: Ray's recorder puts `ray_` first
    while True:
        series = [(tags, v) for name, tags, v in scrape_all(cluster) if name == served]
        mine = [(tags, v) for tags, v in series if tags.get("job_id") == res["ids"]["b8"]]
        if any(v == 1 for _, v in mine) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert mine, f"{served} for job {res['ids']['b8']} not in the scrape within 120 s: {series[:3]}"
    assert {t["phase"] for t, v in mine if v == 1} == {"Succeeded"}, series
    assert {t["phase"] for t, _ in mine} == set(PHASES) and all(t["name"] == "jobs-b8" for t, _ in mine)


def test_three_jobs_packed_on_whole_linked_partitions_sharing_none(
    cluster: Cluster, three_jobs: tuple[dict[str, Any], Path]
) -> None:
    res, tmp_path = three_jobs
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


def test_a_killed_worker_shows_restarting_then_running_then_succeeded(cluster: Cluster, tmp_path: Path) -> None:
    res = cluster.driver(KILL_ONE, str(tmp_path), timeout=500)
    assert res["results"]["kill"]["ok"], res["results"]
    job = cli_jobs(cluster, "show", res["id"])
    (tmp_path / "job.json").write_text(json.dumps(job, indent=2))
    assert phases(job) == ["Pending", "Starting", "Running", "Restarting", "Running", "Succeeded"], job["phases"]
    check_times(job)
    assert job["restarts"] == 1 and job["attempts"] == 2 and job["workers"] == 2
    killed = [r for r in job["retired_replicas"] if r["pid"] == res["killed"]["pid"]]
    assert len(killed) == 1 and killed[0]["attempt"] == 1 and killed[0]["phase"] == "Restarting"
    assert all(r["attempt"] == 2 and r["pid"] != res["killed"]["pid"] for r in job["replicas"])
    counts = hook_counts(tmp_path / "hooks.log")
    assert counts["pre_create"] == counts["post_terminate"] == 4, counts


def _check_size(cluster: Cluster, ws_dir: Path, size: int, parts: list[str]) -> None:
    reports = sorted((json.loads(p.read_text()) for p in ws_dir.glob("rank*.json")), key=lambda r: r["world_rank"])
    assert [r["world_rank"] for r in reports] == list(range(size))
    assert [r["partition"] for r in reports] == parts
    for r in reports:
        # One worker per partition (raylet): local rank 0 of 1, node rank = its raylet's order.
        want = {"world_rank": r["world_rank"], "world_size": size, "local_rank": 0, "local_world_size": 1}
        assert {k: r[k] for k in want} == want and r["node_rank"] == r["world_rank"]
        assert r["ray_context"] == {**want, "node_rank": r["world_rank"]}, "Ray's own context agrees"
        assert r["env"]["WORLD_SIZE"] == str(size) and r["env"]["LOCAL_RANK"] == "0"
        assert r["env"]["NODE_RANK"] == str(r["world_rank"])
        visible = parse_visible_ids(r["env"]["NEURON_RT_VISIBLE_CORES"])
        assert visible == sorted(int(i) for i in r["own_ids"]) and set(visible) == cores(cluster)[r["partition"]]


def test_an_elastic_job_starts_at_two_and_grows_to_four(cluster: Cluster, tmp_path: Path) -> None:
    res = cluster.driver(ELASTIC, str(tmp_path), timeout=560)
    assert res["results"]["elastic"]["ok"] and res["results"]["holder"]["ok"], res["results"]
    at_two = res["at_two"]
    assert at_two["workers"] == 2 and (at_two["min_workers"], at_two["max_workers"]) == (2, 4)
    assert sorted(r["partition"] for r in at_two["replicas"]) == ["p0", "p1"]
    job = cli_jobs(cluster, "show", res["id"])
    (tmp_path / "job.json").write_text(json.dumps(job, indent=2))
    assert job["workers"] == 4 and (job["min_workers"], job["max_workers"]) == (2, 4)
    assert phases(job) == ["Pending", "Starting", "Running", "Restarting", "Running", "Succeeded"], job["phases"]
    assert sorted(r["partition"] for r in job["replicas"]) == ["p0", "p1", "p2", "p3"]
    _check_size(cluster, tmp_path / "elastic" / "ws2", 2, ["p0", "p1"])
    _check_size(cluster, tmp_path / "elastic" / "ws4", 4, ["p0", "p1", "p2", "p3"])
    counts = hook_counts(tmp_path / "hooks.log")
    assert counts["pre_create"] == counts["post_terminate"] == 6, counts
    finals = [json.loads(p.read_text()) for p in (tmp_path / "elastic" / "final").glob("rank*.json")]
    assert len(finals) == 4 and len({tuple(f["weights"]) for f in finals}) == 1, "trained together at 4"
