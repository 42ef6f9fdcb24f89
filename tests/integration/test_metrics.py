"""Metrics with real Ray: every device of every partition
exactly once on Ray's Prometheus endpoints, under Ray's `ray_` prefix, tagged
with its host and partition; host values once per host; exporters named by
node id; orphans in `status`, `top` and a gauge with PID and command; unknown
health is no value, never 0."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ray_accel.core.hosts import host_key
from ray_accel.jobs.store import STORE_NAME
from tests.cli_process import repo_pythonpath
from tests.dashboard_probe import orphan
from tests.integration import drivers
from tests.integration.cluster_harness import Cluster, ClusterSpec, start_cluster
from tests.integration.scrapes import scrape_all, top

pytestmark = pytest.mark.ray


def host_of(cluster: Cluster) -> str:
    """This host's key (its name and the node IP its record names), as every series tags it."""
    record = json.loads((Path(cluster.env["RAYACCEL_STATE_DIR"]) / "host.json").read_text())
    key = host_key(socket.gethostname(), record["host_ip"])
    assert {p["labels"]["ray-accel.io/host"] for p in record["partitions"]} == {key}, "the host label"
    return key


@pytest.fixture(scope="module")
def cluster(trn1_cluster: Cluster) -> Cluster:
    """The shared cluster (tests.clusters.TRN1), metrics every second."""
    return trn1_cluster


# A cluster of its own for the test that injects faults into it.
FAULTY = ClusterSpec(
    "faults",
    "trn1.32xlarge",
    2,
    env={"RAYACCEL_METRICS_INTERVAL_S": "1", "RAY_metrics_report_interval_ms": "1000"},
)


@pytest.fixture
def faulty(tmp_path: Path) -> Iterator[Cluster]:
    spec = replace(FAULTY, env={**FAULTY.env, "RAYACCEL_MOCK_FAULTS": str(tmp_path / "faults.json")})
    c = start_cluster(tmp_path, spec)
    try:
        yield c
    finally:
        c.stop()


@contextlib.contextmanager
def holding(cluster: Cluster) -> Iterator[dict[str, Any]]:
    """An actor holding two cores in each partition, while the context lasts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAYACCEL_")}
    env.update(cluster.status["env"], PYTHONPATH=repo_pythonpath())
    proc = subprocess.Popen(
        [sys.executable, "-c", drivers.HOLD_ACTORS, cluster.address, "600"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        yield json.loads(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def holders(cluster: Cluster) -> Iterator[dict[str, Any]]:
    with holding(cluster) as held:
        yield held


@pytest.fixture(scope="module")
def orphan_proc(cluster: Cluster, holders: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A process outside Ray that holds p0's last device (its published mask,
    which the mock reads as a vendor tool's per-process report); the holders
    take p0's first cores."""
    p0 = cluster.part("p0")
    per_device = len(p0["core_ids"]) // len(p0["device_ids"])
    cores = ",".join(str(c) for c in p0["core_ids"][-per_device:])
    with orphan(cluster, cores) as pid:
        yield {"pid": pid, "device_id": p0["device_ids"][-1], "partition": "p0"}


def wait_for(check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
            if result:
                return result
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(1)


def held_memory(samples: list[tuple[str, dict[str, str], float]], pid: int) -> dict[str, float]:
    """Device id -> device memory the workload of `pid` holds, as scraped."""
    return {
        labels["device_id"]: value
        for name, labels, value in samples
        if name == "ray_accel_workload_device_memory_bytes" and labels["workload"].endswith(f"[{pid}]")
    }


def held_devices(holder: dict[str, Any]) -> set[str]:
    """The devices of the cores a holder was given (two cores a device on trn1)."""
    return {f"neuron:{int(c) // 2}" for c in holder["cores"].split(",")}


def test_scrape_shows_every_device_once_with_its_partition(cluster: Cluster, holders: dict[str, Any]) -> None:
    owner = {d: p["partition"] for p in cluster.status["partitions"] for d in p["device_ids"]}

    def check() -> list[tuple[str, dict[str, str], float]]:
        samples = scrape_all(cluster)
        util = [
            (labels["device_id"], labels["partition"])
            for name, labels, _ in samples
            if name == "ray_accel_device_utilization"
        ]
        assert sorted(util) == sorted(owner.items()), "every device exactly once, with its partition"
        pids = {int(h["pid"]) for h in holders.values()}
        seen = {
            int(labels["workload"].rsplit("[", 1)[1].rstrip("]"))
            for n, labels, _ in samples
            if n == "ray_accel_workload_rss_bytes"
        }
        assert pids <= seen
        # A holder's PID may be sampled while it is still an idle pooled
        # worker (`ray::IDLE`, no mask yet): wait for the sample taken after
        # it became the holder, which carries its device memory.
        for part, h in holders.items():
            assert set(held_memory(samples, h["pid"])) == held_devices(h), part
        return samples

    samples = wait_for(check)
    host = host_of(cluster)
    for name in (
        "ray_accel_device_utilization",
        "ray_accel_device_memory_used_bytes",
        "ray_accel_device_memory_total_bytes",
        "ray_accel_device_healthy",
        "ray_accel_device_power_watts",
        "ray_accel_device_temperature_celsius",
    ):
        tagged = sorted(
            (labels["host"], labels["partition"], labels["device_id"]) for n, labels, _ in samples if n == name
        )
        assert tagged == sorted((host, p, d) for d, p in owner.items()), f"{name}: each device once, host and partition"
    power = {labels["device_id"]: v for n, labels, v in samples if n == "ray_accel_device_power_watts"}
    temp = {labels["device_id"]: v for n, labels, v in samples if n == "ray_accel_device_temperature_celsius"}
    # The mock's samples are fixed functions of the device index (backends/mock/ray_accel_mock/plugin.py).
    assert power == {f"neuron:{i}": 100.0 + 10 * i for i in range(16)}
    assert temp == {f"neuron:{i}": 40.0 + i for i in range(16)}
    assert all(labels["host"] == host for n, labels, _ in samples if n.startswith("ray_accel_workload"))
    for name in ("ray_accel_host_devices", "ray_accel_host_memory_used_bytes"):
        per_host = [(labels["host"], v) for n, labels, v in samples if n == name]
        assert [h for h, _ in per_host] == [host], f"{name}: once per host, not once per raylet"
    assert [v for n, _, v in samples if n == "ray_accel_host_devices"] == [16.0]
    for part, h in holders.items():
        dev_mem = held_memory(samples, h["pid"])
        assert set(dev_mem) == held_devices(h), (part, dev_mem, h["cores"])
        assert all(
            labels["partition"] == part
            for n, labels, _ in samples
            if n.startswith("ray_accel_workload") and labels["workload"].endswith(f"[{h['pid']}]")
        )
        assert sum(dev_mem.values()) == 2 * 64 * 1024**2, "64 MiB per held core, on its own process only"


def test_top_agrees_with_the_scrape(cluster: Cluster, holders: dict[str, Any]) -> None:
    def sampled() -> dict[str, Any]:
        # Holders made just before this test are in the exporters' next sample (every second).
        view = top(cluster)
        assert {h["pid"] for h in holders.values()} <= {w["pid"] for w in view["workloads"]}
        return view

    view = wait_for(sampled)
    assert {"partitions", "devices", "workloads"} <= set(view)
    scraped = {
        labels["device_id"]: (labels["partition"], value)
        for name, labels, value in scrape_all(cluster)
        if name == "ray_accel_device_utilization"
    }
    assert len(view["devices"]) == 16
    for d in view["devices"]:
        assert {"id", "partition", "utilization", "memory_used_bytes", "memory_total_bytes", "healthy"} <= set(d)
        assert scraped[d["id"]] == (d["partition"], pytest.approx(d["utilization"]))
    pids = {w["pid"]: w for w in view["workloads"]}
    for part, h in holders.items():
        assert pids[h["pid"]]["partition"] == part


def test_vanished_device_and_failing_source_are_reported(faulty: Cluster) -> None:
    with holding(faulty) as holders:
        check_faults(faulty, holders)


def check_faults(cluster: Cluster, holders: dict[str, Any]) -> None:
    faults = Path(cluster.env["RAYACCEL_MOCK_FAULTS"])
    faults.write_text(json.dumps({"lost": ["neuron:3"]}))
    try:

        def lost() -> dict[str, Any]:
            view = top(cluster)
            d3 = next(d for d in view["devices"] if d["id"] == "neuron:3")
            # The sample says why it has no reading; the rule (the host's decider) says unhealthy.
            assert d3["healthy"] is False and d3["health_state"] == "unhealthy" and d3["reason"] == "device disappeared"
            return view

        view = wait_for(lost)
        assert all(d["healthy"] for d in view["devices"] if d["id"] != "neuron:3"), "the others are still collected"
        assert any("neuron:3 disappeared" in e for e in view["errors"])
        wait_for(
            lambda: any(
                name == "ray_accel_device_healthy" and labels["device_id"] == "neuron:3" and value == 0.0
                for name, labels, value in scrape_all(cluster)
            )
        )
        faults.write_text(json.dumps({"fail": True}))

        def failing() -> dict[str, Any]:
            view = top(cluster)
            assert all("metric source failed" in (d["reason"] or "") for d in view["devices"]), view["devices"]
            # The rule cannot read the others: unknown. neuron:3 is not vouched for again.
            assert all(d["healthy"] is None for d in view["devices"] if d["id"] != "neuron:3")
            return view

        view = wait_for(failing)
        assert {w["pid"] for w in view["workloads"]} >= {h["pid"] for h in holders.values()}, (
            "workloads still collected"
        )
        # Unknown health sets no value (never 0, which means unhealthy); the
        # last 1s age out of Ray's recorder after two report intervals.
        wait_for(lambda: not [s for s in scrape_all(cluster) if s[0] == "ray_accel_device_healthy" and s[2] == 1.0])
        wait_for(lambda: not [s for s in scrape_all(cluster) if s[0] == "ray_accel_device_utilization"])
    finally:
        faults.unlink(missing_ok=True)
    wait_for(lambda: all(d["healthy"] for d in top(cluster)["devices"]))


def test_exporters_are_named_and_placed_by_node_id(cluster: Cluster) -> None:
    view = top(cluster)
    nodes = {p["node_id"]: p for p in view["partitions"]}
    assert sorted(p["partition"] for p in nodes.values()) == ["p0", "p1"]
    assert all(p["exporter"] == "ok" and p["alive"] for p in nodes.values()), view["partitions"]
    # The namespace also holds the job store once a module sharing this cluster has run a fit.
    names = [n for n in cluster.driver(LIST_EXPORTERS) if n != STORE_NAME]
    assert sorted(names) == sorted(f"exporter-{n}" for n in nodes), "one exporter per raylet, named by its node id"


LIST_EXPORTERS = r"""
import json, sys
import ray
ray.init(address=sys.argv[1], log_to_driver=False)
actors = ray.util.list_named_actors(all_namespaces=True)
print(json.dumps([a["name"] for a in actors if a["namespace"] == "ray-accel"]))
"""


def test_orphan_in_status_top_and_the_scrape_with_pid_and_command(
    cluster: Cluster, holders: dict[str, Any], orphan_proc: dict[str, Any]
) -> None:
    pid, host = orphan_proc["pid"], host_of(cluster)
    want = {"pid": pid, "device_id": orphan_proc["device_id"], "partition": "p0", "host": host}

    def in_top() -> list[dict[str, Any]]:
        view = top(cluster)
        found = [o for o in view["orphans"] if o["pid"] == pid]
        # What top says of each exporter and the orphans it saw, should it fail.
        assert [{k: o[k] for k in want} for o in found] == [want], (view["errors"], view["partitions"], view["orphans"])
        return found

    (seen,) = wait_for(in_top)
    assert "python" in seen["command"]
    holder_pids = {h["pid"] for h in holders.values()}
    assert not holder_pids & {o["pid"] for o in top(cluster)["orphans"]}, "workers of the owning raylet are no orphans"
    proc = cluster.cli("status", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    status = json.loads(proc.stdout)
    assert [{k: o[k] for k in want} for o in status["orphans"] if o["pid"] == pid] == [want]
    text = cluster.cli("status")
    assert text.returncode == 0 and str(pid) in text.stdout and "ORPHAN PID" in text.stdout

    def in_scrape() -> list[dict[str, str]]:
        found = [labels for n, labels, v in scrape_all(cluster) if n == "ray_accel_device_orphan_processes" and v == 1]
        assert [(f["pid"], f["device_id"], f["partition"], f["host"]) for f in found] == [
            (str(pid), want["device_id"], "p0", host)
        ]
        return found

    (labels,) = wait_for(in_scrape)
    assert "python" in labels["command"]
