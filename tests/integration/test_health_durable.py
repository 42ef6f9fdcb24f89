"""A device out of service stays out: across a decider killed outright and
started again by `start --recover` (whatever its counters read now), across
kept health that cannot be read (unknown, with why), across `stop` and a
new `start` with the same state directory, until `ray-accel health clear`.

A mock trn1.32xlarge in two partitions, `--on-unhealthy shrink`; the fault
is an uncorrected ECC error on neuron:9 (in p1), then the mock's counter
left grown alone, as the hardware would show it to a new monitor."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from ray_accel.cluster.host import free_port
from ray_accel.core.health import Health
from ray_accel.core.health_kept import KEPT_FILE
from ray_accel.core.health_state import PartState
from tests.cli_process import run_cli
from tests.clusters import Cluster, ClusterSpec, start_cluster
from tests.integration.cluster_harness import raylet_pids
from tests.integration.health_steps import alive_node, device, health, part, record, until, until_poll, write_faults

pytestmark = pytest.mark.ray

D = "neuron:9"
ECC = "mem_ecc_uncorrected"
# How long p1 is watched to stay shrunk after a restart: a minute after the
# decider was killed outright, less after the kept state was made unreadable.
WATCH_S = 60.0
WATCH_UNREADABLE_S = 20.0


def kill_decider(cluster: Cluster) -> None:
    decider = record(cluster).decider
    assert decider is not None
    os.kill(decider.pid, signal.SIGKILL)
    assert until(lambda: not decider.record.alive(), 30)


def recover(cluster: Cluster) -> None:
    proc = cluster.cli("start", "--recover", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]


def stays_shrunk(cluster: Cluster, watch_s: float) -> None:
    """For `watch_s`, p1 serves 14 NeuronCores in Ray's view and health.json has it shrunk."""
    deadline = time.monotonic() + watch_s
    while time.monotonic() < deadline:
        assert alive_node(cluster, "p1").total["neuron_cores"] == 14
        assert part(health(cluster), "p1").state is PartState.SHRUNK
        time.sleep(1)


def test_a_device_out_for_a_sticky_fault_stays_out_until_cleared(tmp_path: Path) -> None:
    faults = tmp_path / "faults.json"
    write_faults(faults, {})
    spec = ClusterSpec(
        "health-durable",
        "trn1.32xlarge",
        2,
        start_args=("--on-unhealthy", "shrink", "--health-interval", "0.5", "--drain-deadline", "10"),
        env={"RAYACCEL_MOCK_FAULTS": str(faults)},
    )
    cluster = start_cluster(tmp_path / "c", spec)
    try:
        assert alive_node(cluster, "p1").total["neuron_cores"] == 16
        write_faults(faults, {"events": [{"device": D, "kind": "ecc", "code": ECC, "count": 2}]})
        until_poll(cluster, lambda h: part(h, "p1").state is PartState.SHRUNK, polls=200)
        assert alive_node(cluster, "p1").total["neuron_cores"] == 14

        # The decider killed outright; the counter stays grown, the event is gone.
        kill_decider(cluster)
        write_faults(faults, {"counters": {D: {ECC: 2}}})
        recover(cluster)
        stays_shrunk(cluster, WATCH_S)
        shown = json.loads(cluster.cli("health", "--json").stdout)
        (dev,) = [d for d in shown["devices"] if d["device_id"] == D]
        assert dev["state"] == "unhealthy" and dev["last_event"]["code"] == ECC, dev
        (p1,) = [p for p in shown["partitions"] if p["partition"] == "p1"]
        assert p1["state"] == "shrunk" and p1["out"] == [D], p1

        # Kept health that cannot be read: unknown, with why, and still out.
        kill_decider(cluster)
        kept = cluster.state_dir / KEPT_FILE
        kept.write_bytes(kept.read_bytes()[:40])
        recover(cluster)
        stays_shrunk(cluster, WATCH_UNREADABLE_S)
        dev_health = device(health(cluster), D)
        assert dev_health.state is Health.UNKNOWN
        assert "device health unknown" in dev_health.healthy_again and "not valid JSON" in dev_health.healthy_again

        # `stop` keeps it; a new start with the same state directory starts p1 without it.
        stopped = cluster.stop()
        assert stopped.returncode == 0, stopped.stderr
        assert kept.exists()
        proc = run_cli(*spec.command(free_port()), env=cluster.env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        cluster = Cluster(cluster.env, json.loads(proc.stdout), proc.stderr)
        assert f"{D} is out of service" in proc.stderr and "p1 starts without it" in proc.stderr
        assert cluster.status["out_of_service"] == [{"device": D, "partition": "p1"}]
        assert alive_node(cluster, "p1").total["neuron_cores"] == 14

        cleared = cluster.cli("health", "clear", D, "--json")
        assert cleared.returncode == 0, cleared.stderr
        until_poll(cluster, lambda h: part(h, "p1").state is PartState.SERVING, polls=200)
        assert until(lambda: alive_node(cluster, "p1").total["neuron_cores"] == 16, 60)
    finally:
        stopped = cluster.stop()
    assert stopped.returncode == 0, stopped.stderr
    assert not raylet_pids()
