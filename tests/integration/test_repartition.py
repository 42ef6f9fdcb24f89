"""`ray-accel repartition` on a running mock trn1.32xlarge split in four by
devices (a, b, c, d):

- a dry run, the same split again, refused splits (a device health keeps
  out among them), then c and d merged into cd while a detached actor on a
  holds 2 NeuronCores: a and b keep their raylets and Ray node
  ids, c's and d's nodes end drained with the repartition's message, `top`
  and the exporters' series follow;
- SIGKILL mid-drain then `start --recover` (which finishes the change),
  SIGTERM while c starts, `stop` during the drain: each leaves a host
  `status` describes truthfully;
- a fit on c and d while a and b are full restarts once, on cd."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from ray_accel.core.health import Health
from tests.cli_process import CLI
from tests.integration.cluster_harness import Cluster, ClusterSpec, raylet_pids, start_cluster
from tests.integration.health_steps import (
    WAITING_FIT,
    alive_node,
    background_driver,
    device,
    gcs_view,
    lock_is_free,
    record,
    result_of,
    until,
    until_poll,
    waiting_fit,
    write_faults,
)
from tests.integration.host_invariants import ACTOR
from tests.integration.scrapes import scrape_all, top

pytestmark = pytest.mark.ray

FOUR = "a=0-3;b=4-7;c=8-11;d=12-15"
MERGED = "a=0-3;b=4-7;cd=8-15"


def test_merging_two_partitions_leaves_the_others_running(tmp_path: Path) -> None:
    faults = tmp_path / "faults.json"
    write_faults(faults, {})
    spec = ClusterSpec(
        "repartition",
        "trn1.32xlarge",
        4,
        start_args=("--mode", "manual", "--manual", FOUR, "--health-interval", "0.5"),
        env={
            "RAYACCEL_MOCK_FAULTS": str(faults),
            "RAYACCEL_METRICS_INTERVAL_S": "1",
            "RAY_metrics_report_interval_ms": "1000",
        },
    )
    cluster = start_cluster(tmp_path / "c", spec)
    try:
        before = {p["partition"]: (p["pid"], p["node_id"]) for p in cluster.status["partitions"]}
        head = cluster.status["head"]
        assert head["alive"] and head["device_ids"] == [] and not any(head["total"].values()), "no devices, no CPUs"
        assert cluster.driver(ACTOR, "create", before["a"][1]) == [before["a"][1]]

        # The dry run says what would happen and changes nothing.
        dry = cluster.cli("repartition", "--mode", "manual", "--manual", MERGED, "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        planned = json.loads(dry.stdout)
        assert planned["changes"] is True
        assert {p["partition"]: p["action"] for p in planned["partitions"]} == {
            "a": "kept", "b": "kept", "c": "removed", "d": "removed", "cd": "added",
        }  # fmt: skip
        same = cluster.cli("repartition", "--manual", FOUR)
        assert same.returncode == 0 and same.stdout.strip() == "nothing to change", same.stderr

        # Refused splits: exit 2 naming the value.
        for args, needle in (
            (("--manual", "a=0-3;b=3-7;cd=8-15"), "device neuron:3 (index 3) is in both partition 'a' and"),
            (("--partitions", "0"), "'0'"),
            (("--manual", "a=0-3;b=4-7;cd=8-16"), "unknown device index 16"),
        ):
            bad = cluster.cli("repartition", *args)
            assert bad.returncode == 2 and needle in bad.stderr, (args, bad.stderr)
        assert {p["partition"]: (p["pid"], p["node_id"]) for p in cluster.refresh()["partitions"]} == before

        # The merge.
        done = cluster.cli("repartition", "--mode", "manual", "--manual", MERGED, "--drain-deadline", "60", "--json")
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout) == planned
        assert "draining node" in done.stderr
        assert "ended by Ray once idle" in done.stderr, "c and d end once idle (their exporters gone)"
        after = {p["partition"]: (p["pid"], p["node_id"]) for p in cluster.refresh()["partitions"]}
        assert list(after) == ["a", "b", "cd"]
        assert after["a"] == before["a"] and after["b"] == before["b"]
        assert cluster.driver(ACTOR, "again") == [before["a"][1]], "the actor on a answers again"
        assert alive_node(cluster, "cd").total["neuron_cores"] == 16
        nodes, _ = gcs_view(cluster)
        for name in ("c", "d"):
            old = nodes[before[name][1]]
            assert not old.alive and "ray-accel repartition: partition " + name in old.death_message, old
        assert sum(n.total.get("neuron_cores", 0) for n in nodes.values() if n.alive) == 32
        # The raylets running are exactly the head's (no devices, untouched) and the three partitions'.
        raylets = {r.pid for p in record(cluster).raylets() if (r := p.raylet()) is not None}
        assert len(raylets) == 4 and cluster.refresh()["head"]["pid"] == head["pid"] in raylets
        assert until(lambda: raylet_pids() == raylets, 30), (raylet_pids(), raylets)
        assert record(cluster).repartition is None

        # `top` and the exporters' series follow the new partitions within 30 s.
        def followed() -> bool:
            series = {
                labels.get("partition") for name, labels, _ in scrape_all(cluster) if name.startswith("ray_accel_")
            }
            return [p["partition"] for p in top(cluster)["partitions"]] == ["a", "b", "cd"] and series - {None} == {
                "a", "b", "cd"
            }  # fmt: skip

        assert until(followed, 30, every_s=1)

        # A split that gives back a device health keeps out: refused, naming it.
        write_faults(faults, {"events": [{"device": "neuron:12", "kind": "ecc", "code": "mem_ecc_uncorrected"}]})
        until_poll(cluster, lambda h: device(h, "neuron:12").state is Health.UNHEALTHY, polls=10)
        pids = {p["partition"]: p["pid"] for p in cluster.refresh()["partitions"]}
        bad = cluster.cli("repartition", "--manual", FOUR)
        assert bad.returncode == 2 and "device neuron:12 is out of service" in bad.stderr, bad.stderr
        assert {p["partition"]: p["pid"] for p in cluster.refresh()["partitions"]} == pids
    finally:
        stopped = cluster.stop()
    assert stopped.returncode == 0, stopped.stderr


def _background(cluster: Cluster, log: Path, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAYACCEL_")}
    env.update(cluster.env)
    return subprocess.Popen(
        [CLI, "repartition", *args], env=env, stdout=subprocess.DEVNULL, stderr=open(log, "w"), text=True
    )


def _helper_pid(cluster: Cluster) -> int:
    helper = record(cluster).repartition
    assert helper is not None
    return helper.pid


def _hold(cluster: Cluster, *names: str) -> None:
    """A detached actor holding all 8 NeuronCores of each of `names`."""
    for name in names:
        node = cluster.refresh() and cluster.part(name)["node_id"]
        cluster.driver(HOLD, f"{name}-{node[:8]}", node)


def test_a_repartition_killed_stopped_or_interrupted_leaves_a_truthful_host(tmp_path: Path) -> None:
    spec = ClusterSpec("repartition-undo", "trn1.32xlarge", 4, start_args=("--mode", "manual", "--manual", FOUR))
    cluster = start_cluster(tmp_path / "c", spec)
    log = tmp_path / "repartition.log"
    try:
        # SIGKILL mid-drain (actors keep c and d busy), then `start --recover` finishes the change.
        _hold(cluster, "c", "d")
        cli = _background(cluster, log, "--manual", MERGED, "--drain-deadline", "20")
        until(lambda: "draining node" in log.read_text(), 120)
        os.kill(_helper_pid(cluster), signal.SIGKILL)
        assert cli.wait(60) == 1
        interrupted = cluster.refresh()["change"]
        assert interrupted["kind"] == "repartition" and not interrupted["running"], interrupted
        recovered = cluster.cli("start", "--recover", "--json")
        assert recovered.returncode == 0, recovered.stderr
        assert "finishing the repartition interrupted at step" in recovered.stderr
        status = cluster.refresh()
        assert [p["partition"] for p in status["partitions"]] == ["a", "b", "cd"] and status["change"] is None
        assert all(p["alive"] for p in status["partitions"])
        assert sum(p["total"].get("neuron_cores", 0) for p in status["partitions"]) == 32

        # SIGTERM while c starts: what it was starting is stopped; the change stays recorded for `--recover`.
        cli = _background(cluster, log, "--manual", FOUR, "--drain-deadline", "0")
        until(lambda: "restarting c" in log.read_text(), 120, every_s=0.05)
        os.kill(_helper_pid(cluster), signal.SIGTERM)
        assert cli.wait(120) == 1
        status = cluster.refresh()
        alive = {p["partition"]: p["alive"] for p in status["partitions"]}
        assert alive == {"a": True, "b": True, "cd": False}, status
        assert status["change"]["starting"] == ["c", "d"] and not status["change"]["running"], status["change"]
        assert len(raylet_pids()) == 3, "the head's, a's and b's"
        recovered = cluster.cli("start", "--recover", "--json")
        assert recovered.returncode == 0, recovered.stderr
        status = cluster.refresh()
        assert [p["partition"] for p in status["partitions"]] == ["a", "b", "c", "d"]
        assert sum(p["total"].get("neuron_cores", 0) for p in status["partitions"]) == 32

        # `stop` during the drain: the repartition goes first, then every process, the record and the lock.
        _hold(cluster, "c", "d")
        cli = _background(cluster, log, "--manual", MERGED, "--drain-deadline", "600")
        until(lambda: "draining node" in log.read_text(), 120)
        stopped = cluster.stop()
        assert stopped.returncode == 0, stopped.stderr
        assert cli.wait(60) == 1
        assert until(lambda: not raylet_pids(), 30)
        assert not (cluster.state_dir / "host.json").exists() and lock_is_free(cluster.state_dir)
    finally:
        cluster.stop()


def test_a_fit_on_merged_partitions_restarts_on_the_merged_one(tmp_path: Path) -> None:
    spec = ClusterSpec(
        "repartition-fit",
        "trn1.32xlarge",
        4,
        start_args=("--mode", "manual", "--manual", FOUR),
        env={"RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S": "1"},
        dashboard=True,  # the job store asks Ray's state API
    )
    cluster = start_cluster(tmp_path / "c", spec)
    out, fit_log = tmp_path / "fit", tmp_path / "fit.log"
    out.mkdir()
    fit = None
    try:
        # a's and b's NeuronCores held, so the fit's two 8-core workers run on c and d.
        _hold(cluster, "a", "b")
        fit_spec = waiting_fit("repartition", 2, {"CPU": 0, "neuron_cores": 8}, max_failures=2, steps=3, skip_if=True)
        fit = background_driver(cluster, WAITING_FIT, str(out), fit_spec, log=fit_log)
        until(lambda: len(list((out / "ws2").glob("rank*.json"))) == 2 or fit.poll() is not None, 400)
        assert fit.poll() is None, fit_log.read_text()[-3000:]
        (out / "moved").write_text("1")
        done = cluster.cli("repartition", "--manual", MERGED, "--drain-deadline", "60", timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        result = result_of(fit, fit_log, 600)
        assert result["ok"], result
        job = json.loads(cluster.cli("jobs", "show", result["id"], "--json").stdout)
        assert job["restarts"] == 1 and job["phases"][-1]["phase"] == "Succeeded", job["phases"]
        assert [r.split("/")[-1] for r in job["partitions"]] == ["cd"], job  # its last attempt's workers
    finally:
        if fit is not None and fit.poll() is None:
            fit.kill()
            fit.wait()
        cluster.stop()


HOLD = r"""
import json, sys
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address=sys.argv[1], namespace="repartition-test", log_to_driver=False)

class Holder:
    def ping(self):
        return 1

h = ray.remote(Holder).options(name=f"hold-{sys.argv[2]}", lifetime="detached", num_cpus=0,
                               resources={"neuron_cores": 8},
                               scheduling_strategy=NodeAffinitySchedulingStrategy(sys.argv[3], soft=False)).remote()
print(json.dumps([ray.get(h.ping.remote(), timeout=120)]))
"""
