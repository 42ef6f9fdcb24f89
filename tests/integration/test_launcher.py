"""Partitions as raylets, by `ray-accel start`, with a real Ray: tasks see
only their partition's cores, `status` reports them, a second start is
refused, a killed raylet is seen dead and recovered, GPU actors share their
partition's GPUs. Bad input that must start nothing is in the pure tier
(tests/unit/test_start_refusals.py): it never starts Ray."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.cli_process import run_cli
from tests.clusters import ClusterSpec
from tests.integration import drivers
from tests.integration.cluster_harness import Cluster, free_port, raylet_pids, start_cluster
from tests.integration.health_steps import until

pytestmark = pytest.mark.ray


def _cores(mask: str) -> set[int]:
    return {int(c) for c in mask.split(",")}


def test_labelled_tasks_see_only_their_partition_and_never_share(trn1_cluster: Cluster) -> None:
    results = trn1_cluster.driver(drivers.NEURON_TASKS, "p0,p1", "200")
    assert len(results) == 200
    owned = {p["partition"]: set(p["core_ids"]) for p in trn1_cluster.status["partitions"]}
    assert owned == {"p0": set(range(16)), "p1": set(range(16, 32))}
    for r in results:
        cores = _cores(r["cores"])
        assert len(cores) == 2
        assert cores <= owned[r["part"]], f"{r['part']} task saw {r['cores']}"
        assert r["cores"] == ",".join(str(c) for c in sorted(cores)), "masks are written sorted"
    overlapping = 0
    for i, a in enumerate(results):
        for b in results[i + 1 :]:
            if a["start"] < b["end"] and b["start"] < a["end"]:
                overlapping += 1
                assert not (_cores(a["cores"]) & _cores(b["cores"])), f"concurrent tasks share a core: {a} {b}"
    assert overlapping > 0, "the check needs tasks that ran at the same time"


def test_status_json(trn1_cluster: Cluster) -> None:
    status = trn1_cluster.refresh()
    assert status["running"] is True
    for p in status["partitions"]:
        assert {"partition", "device_ids", "core_ids", "visible_ids", "pid", "node_id", "alive"} <= set(p)
        assert p["alive"] and p["registered"]
        assert p["total"]["neuron_cores"] == 16
    # Each raylet is its own node in Ray (their launchers, forked from one
    # launch server, once drew one node ID and registered as one node).
    nodes = [p["node_id"] for p in status["partitions"]] + [status["head"]["node_id"]]
    assert len(set(nodes)) == len(nodes), nodes
    alive = {n["NodeID"] for n in trn1_cluster.driver(drivers.NODES) if n["Alive"]}
    assert set(nodes) <= alive, (nodes, alive)
    state = Path(trn1_cluster.env["RAYACCEL_STATE_DIR"])
    assert state.stat().st_mode & 0o777 == 0o700
    assert (state / "host.json").stat().st_mode & 0o777 == 0o600


def test_second_start_is_refused(trn1_cluster: Cluster) -> None:
    before = raylet_pids()
    proc = trn1_cluster.cli("start", "--head", "--partitions", "2", "--port", str(free_port()))
    assert proc.returncode == 2
    assert "already running" in proc.stderr
    assert raylet_pids() == before
    assert trn1_cluster.refresh()["running"]


@pytest.fixture
def own_trn1(tmp_path: Path) -> Iterator[Cluster]:
    """A cluster of this test alone: it kills one of its raylets."""
    cluster = start_cluster(tmp_path, ClusterSpec("own-trn1", "trn1.32xlarge", 2, start_args=("--no-metrics",)))
    try:
        yield cluster
    finally:
        cluster.stop()


def test_killed_partition_is_seen_dead_others_serve_and_recover_restores(own_trn1: Cluster) -> None:
    trn1_cluster = own_trn1
    victim = trn1_cluster.part("p1")
    mask = victim["visible_ids"]
    raylet = psutil.Process(victim["pid"])
    raylet.kill()
    # Gone (or a zombie) once SIGKILL lands; the first status after that reads
    # it dead from its PID, without waiting for the GCS to miss its heartbeats
    # (about 30 s). A bound in seconds would measure the host's load instead:
    # `status` itself took over 5 s on a busy two-core CI run.
    until(lambda: _ended(raylet), 10)
    status = trn1_cluster.refresh()
    p1 = next(p for p in status["partitions"] if p["partition"] == "p1")
    assert not p1["alive"], p1
    assert next(p for p in status["partitions"] if p["partition"] == "p0")["alive"]
    served = trn1_cluster.driver(drivers.NEURON_TASKS, "p0", "10")
    assert all(_cores(r["cores"]) <= set(range(16)) for r in served)

    proc = trn1_cluster.cli("start", "--recover", "--json")
    assert proc.returncode == 0, proc.stderr
    status = trn1_cluster.refresh()
    p1 = next(p for p in status["partitions"] if p["partition"] == "p1")
    assert p1["alive"] and p1["visible_ids"] == mask and p1["pid"] != victim["pid"]
    again = trn1_cluster.driver(drivers.NEURON_TASKS, "p1", "10")
    assert all(_cores(r["cores"]) <= set(range(16, 32)) for r in again)


def _ended(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_p4d_split_four_ways_actors_see_their_gpus_then_one_is_drained(tmp_path: Path) -> None:
    # Metrics on: the exporter keeps the drained raylet busy, so it stays draining.
    cluster = start_cluster(tmp_path, ClusterSpec("p4d", "p4d.24xlarge", 4))
    try:
        parts = {p["partition"]: {str(c) for c in p["core_ids"]} for p in cluster.status["partitions"]}
        assert sorted(len(v) for v in parts.values()) == [2, 2, 2, 2]
        seen = cluster.driver(drivers.GPU_ACTORS, ",".join(sorted(parts)))
        assert len(seen) == 8
        for s in seen:
            assert set(s["cvd"].split(",")) <= parts[s["part"]], s
            assert [str(g) for g in s["gpu_ids"]] == s["cvd"].split(",")
        by_part: dict[str, set[str]] = {}
        for s in seen:
            by_part.setdefault(s["part"], set()).update(s["cvd"].split(","))
        assert by_part == parts, "two actors per partition took both of its GPUs"
        # Nothing uses the cluster after this: drain a worker partition's
        # raylet through the seam and read it back as draining from the GCS
        # (it stays so: its metrics exporter keeps it busy until `stop`).
        victim = cluster.status["partitions"][0]  # any partition: none runs the GCS
        drained = cluster.driver(drivers.DRAIN, victim["node_id"], victim["partition"])
        assert drained["accepted"] and drained["before"] == {}, drained
        assert drained["draining"] == {victim["node_id"]: drained["deadline_ms"]}, drained
    finally:
        stopped = cluster.cli("stop", "--grace", "2", "--json")
    assert stopped.returncode == 0
    assert json.loads(stopped.stdout)["stopped"]
    assert run_cli("stop", env=cluster.env).returncode == 0, "stop is idempotent"
