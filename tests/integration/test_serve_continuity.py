"""Serving through a device fault, a repartition and the device's return.

The mock trn1.32xlarge split by hand in four (`p0=0-3;p1=4-7;p2=8-11;
p3=12-15`, 8 NeuronCores each), `--on-unhealthy shrink --drain-deadline
60`. One driver deploys 3 replicas of 2 NeuronCores, at most one per Ray
node (so per partition), one of them on p1 (p3 is held while they are
placed), with Serve's one proxy on the device-less head raylet
(`proxy_location="HeadOnly"`), and a client (a process of its own) sends 14
requests a second to the host's Serve port, one HTTP connection per
request, recording each (when, status, partition, error); both are in
tests/serve_traffic.py, which benchmarks/bench_serve.py runs too. Three
events, in order, on the one cluster:

1. neuron:5 of p1 is lost: the decider drains p1 through Ray and restarts it
   without the device (6 NeuronCores in Ray's view); its replica moves to p3;
2. `repartition --manual "p0=0-3;p1=4-7;p23=8-15"`: p0 and the shrunk p1
   are kept (the same Ray nodes), p2 and p3 drained and removed, p23 added;
   one of their two replicas moves to p1, the other has no partition to go
   to (each serving partition has one) until p23 starts;
3. neuron:5 is back: p1 is drained again (its replica has nowhere to go)
   and restarted whole (8 NeuronCores).

After each: no request failed in its window, the rate never fell under 10
a second, and 3 replicas are RUNNING (`serve.status()`), each on a node
that is alive and not draining in Ray's node table and serving or shrunk in
`ray-accel status --json`. What makes that hold, and what does not, is in
README "Serving on partitions" and docs/serving-findings.md.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from ray_accel.cluster.host import free_port
from ray_accel.core.health_state import PartState
from tests import serve_traffic
from tests.integration.cluster_harness import Cluster, ClusterSpec, start_cluster
from tests.integration.health_steps import (
    alive_node,
    gcs_view,
    part,
    result_of,
    until,
    until_poll,
    write_faults,
)

pytestmark = pytest.mark.ray

SPLIT = "p0=0-3;p1=4-7;p2=8-11;p3=12-15"
MERGED = "p0=0-3;p1=4-7;p23=8-15"
DRAIN_DEADLINE_S = 60
RATE = 14  # requests a second, sent on a fixed schedule whatever the replies take
LOST = "neuron:5"  # of p1 (neuron:4-7, NeuronCores 8-15)


class Served:
    """The driver (`serve_traffic.deploy`) and the client's record, asked and read from the test."""

    def __init__(self, cluster: Cluster, out: Path) -> None:
        self.cluster, self.out, self.asked = cluster, out, 0

    def ask(self) -> dict[str, Any]:
        n, self.asked = self.asked, self.asked + 1
        (self.out / f"ask-{n}").write_text("1")
        answer = self.out / f"answer-{n}.json"
        until(answer.exists, 120, every_s=0.1)
        return dict(json.loads(answer.read_text()))

    def requests(self) -> list[dict[str, Any]]:
        """Every request sent, by when: its answer, or `pending` while it has none."""
        return serve_traffic.requests(self.out)

    def placed(self) -> dict[str, Any] | None:
        """Serve's answer once 3 replicas are RUNNING and nothing else, each on a
        node alive and not draining in Ray's table and serving (or shrunk) in
        `ray-accel status --json`; None until then."""
        answer = self.ask()
        if answer["replica_states"] != {"RUNNING": 3} or len(answer["replica_nodes"]) != 3:
            return None
        nodes, draining = gcs_view(self.cluster)
        status = self.cluster.refresh()
        serving = {
            p["node_id"]: p["partition"]
            for p in status["partitions"]
            if p["alive"] and (p.get("health") or {}).get("state") in ("serving", "shrunk")
        }
        for node in answer["replica_nodes"]:
            if node not in nodes or not nodes[node].alive or node in draining or node not in serving:
                return None
        return {**answer, "partitions": sorted(serving[n] for n in answer["replica_nodes"])}


def test_replicas_keep_serving_through_a_shrink_a_repartition_and_a_return(tmp_path: Path) -> None:
    faults = tmp_path / "faults.json"
    write_faults(faults, {})
    spec = ClusterSpec(
        "serve-continuity",
        "trn1.32xlarge",
        4,
        start_args=(
            "--mode",
            "manual",
            "--manual",
            SPLIT,
            "--on-unhealthy",
            "shrink",
            "--drain-deadline",
            str(DRAIN_DEADLINE_S),
            "--health-interval",
            "0.5",
        ),
        env={"RAYACCEL_MOCK_FAULTS": str(faults)},
        dashboard=True,  # Serve's replicas are listed through Ray's state API
    )
    cluster = start_cluster(tmp_path / "c", spec)
    out = tmp_path / "serve"
    out.mkdir()
    log = tmp_path / "driver.log"
    port = str(free_port())
    options = json.dumps({"max_per_node": 1, "hold": "p3"})  # one replica per partition: p0, p1 and p2
    driver = serve_traffic.spawn("deploy", [cluster.address, port, str(out), options], cluster.driver_env(), log)
    sender: subprocess.Popen[str] | None = None
    served = Served(cluster, out)
    report: dict[str, dict[str, Any]] = {}

    def settled(name: str, start: float, timeout_s: float) -> dict[str, Any]:
        """Once Serve has 3 replicas placed well again: the event's window, checked."""
        placed = until(lambda: driver.poll() is None and served.placed(), timeout_s, every_s=1)
        assert driver.poll() is None, log.read_text()[-3000:]
        end = time.time()
        # Every request sent before `end` answered (or timed out after 30 s, then failed).
        until(lambda: serve_traffic.answered_before(out, end), 40)
        seen = serve_traffic.window(served.requests(), start, end)
        report[name] = {**seen, "failed": len(seen["failed"]), "placed": placed["partitions"], "end": end}
        print(f"\n{name}: {json.dumps({**report[name], 'end': round(end - start, 1)})}")
        assert seen["failed"] == [], seen["failed"][:10]
        assert seen["fewest_per_s"] >= 10, seen
        return placed

    try:
        until(lambda: (out / "serving").exists() or driver.poll() is not None, 300)
        assert driver.poll() is None, log.read_text()[-3000:]
        client_log = tmp_path / "client.log"
        sender = serve_traffic.spawn("client", [port, str(out), str(RATE)], cluster.driver_env(), client_log)
        until(lambda: serve_traffic.requests(out), 60)
        first = json.loads((out / "serving").read_text())
        node_of = {p["partition"]: p["node_id"] for p in cluster.refresh()["partitions"]}
        assert sorted(first["replica_nodes"]) == sorted(node_of[p] for p in ("p0", "p1", "p2")), (first, node_of)
        assert first["proxies"] == {cluster.status["head"]["node_id"]: "HEALTHY"}, first["proxies"]
        p1_before = alive_node(cluster, "p1")
        assert p1_before.total["neuron_cores"] == 8
        time.sleep(3)  # requests before any event: the client and every proxy answer

        # 1. A lost device of p1: drained through Ray, shrunk to 6 NeuronCores.
        t0 = time.time()
        write_faults(faults, {"lost": [LOST]})
        until_poll(cluster, lambda h: part(h, "p1").state is PartState.DRAINING, polls=4)
        until_poll(cluster, lambda h: part(h, "p1").state is PartState.SHRUNK, polls=400)
        shrunk = alive_node(cluster, "p1")
        assert shrunk.node_id != p1_before.node_id and shrunk.total["neuron_cores"] == 6
        settled("shrink", t0, 180)

        # 2. A repartition touching p2 and p3 (each with a replica): p0 and the shrunk p1 kept.
        t1 = time.time()
        kept = {p: alive_node(cluster, p).node_id for p in ("p0", "p1")}
        done = cluster.cli("repartition", "--manual", MERGED, "--drain-deadline", str(DRAIN_DEADLINE_S), "--json")
        assert done.returncode == 0, done.stderr[-3000:]
        actions = {c["partition"]: c["action"] for c in json.loads(done.stdout)["partitions"]}
        assert actions == {"p0": "kept", "p1": "kept", "p2": "removed", "p3": "removed", "p23": "added"}, actions
        assert {p: alive_node(cluster, p).node_id for p in ("p0", "p1")} == kept
        assert alive_node(cluster, "p1").total["neuron_cores"] == 6 and LOST in cluster.part("p1")["out"]
        assert alive_node(cluster, "p23").total["neuron_cores"] == 16
        settled("repartition", t1, 180)

        # 3. The device is back: p1 drained again and restarted whole.
        t2 = time.time()
        write_faults(faults, {})
        until_poll(cluster, lambda h: part(h, "p1").state is PartState.RESTORING, polls=20)
        until_poll(cluster, lambda h: part(h, "p1").state is PartState.SERVING, polls=400)
        whole = alive_node(cluster, "p1")
        assert whole.node_id != shrunk.node_id and whole.total["neuron_cores"] == 8
        placed = settled("return", t2, 180)
        assert placed["partitions"] == ["p0", "p1", "p23"], placed

        everything = serve_traffic.window(served.requests(), t0 - 3, report["return"]["end"])
        print(f"all: {everything['requests']} requests, {len(everything['failed'])} failed")
        assert everything["failed"] == []
    finally:
        (out / "stop").write_text("1")
        try:
            if sender is not None:
                sender.wait(timeout=60)
            if driver.poll() is None:
                result_of(driver, log, 120)
        finally:
            for proc in (driver, sender):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
            stopped = cluster.stop()
    assert stopped.returncode == 0, stopped.stderr
