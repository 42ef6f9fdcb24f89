"""Repair, prove, return, on real Ray with mock hardware: a device out of
service comes back to its partition only once its active check passes
(`checks` in the mock's fault file), visible meanwhile in `top`, `health`
and a real Prometheus; a decider killed mid-check checks again after
`start --recover`; under `--repair reset` a GPU whose driver asks for a
reset is reset once its partition's raylet has ended, then checked, then
returned, and one that asks for a reboot stays out, saying so.

- a mock trn1.32xlarge in two partitions, `--on-unhealthy shrink
  --health-interval 2 --drain-deadline 10`: neuron:9 lost with its check
  failing shrinks p1 to 14 NeuronCores; back, its check still failing, p1
  stays at 14 for 40 s; its check passing, p1 is back to 16 within 60 s.
  While it is out, `top --once --json` lists it unhealthy with its last
  check, Prometheus has `ray_accel_device_healthy` 0 for it, and `health
  check` exits 0/1 by outcome (2 on a device p0 serves). A sticky fault
  cleared by hand with the check failing stays out, then returns once it
  passes, with no second clear. The decider SIGKILLed while a check of 30 s
  runs: after `start --recover` the device is checked again, then returns.
- a mock p4d.24xlarge, `--repair reset`: GPU_RESET on a GPU of p1: one reset
  in `repairs.jsonl`, after p1's old raylet ended, then a check, then the
  return; NODE_REBOOT on another: "reboot required", no reset, it stays out.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli_process import run_cli
from tests.clusters import Cluster, ClusterSpec, start_cluster
from tests.dashboard_probe import metrics_targets, sd_file
from tests.integration.cluster_harness import raylet_pids
from tests.integration.health_steps import alive_node, lock_is_free, record, until, write_faults
from tests.prom import running_prometheus

pytestmark = pytest.mark.ray

ECC = {"device": "neuron:9", "kind": "ecc", "code": "mem_ecc_uncorrected"}


def cores(cluster: Cluster, name: str) -> float:
    try:
        return float(alive_node(cluster, name).total.get("neuron_cores", 0))
    except ValueError:  # no alive raylet of it right now (it is being restarted)
        return -1.0


def settled_at(cluster: Cluster, count: float) -> bool:
    """p1 serves `count` NeuronCores in Ray's view and its restart is over (no host change in the record)."""
    return cores(cluster, "p1") == count and record(cluster).change is None


def shown(cluster: Cluster, device: str) -> dict[str, Any]:
    """The device as `health --json` shows it."""
    proc = cluster.cli("health", "--json")
    assert proc.returncode == 0, proc.stderr
    (found,) = [d for d in json.loads(proc.stdout)["devices"] if d["device_id"] == device]
    return found  # type: ignore[no-any-return]


def stays(check: Any, seconds: float, every_s: float = 1.0) -> None:
    """`check` holds all along `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check(), "it did not hold"
        time.sleep(every_s)


def trn1(tmp_path: Path, faults: Path) -> Cluster:
    spec = ClusterSpec(
        "proof-trn1",
        "trn1.32xlarge",
        2,
        start_args=("--on-unhealthy", "shrink", "--health-interval", "2", "--drain-deadline", "10"),
        env={"RAYACCEL_MOCK_FAULTS": str(faults), "RAYACCEL_METRICS_INTERVAL_S": "1"},
        dashboard=True,  # the service-discovery file Prometheus scrapes by
    )
    return start_cluster(tmp_path / "c", spec)


def test_a_device_returns_only_once_its_check_passes_and_stays_visible_while_out(tmp_path: Path) -> None:
    faults = tmp_path / "faults.json"
    write_faults(faults, {"lost": ["neuron:9"], "checks": {"neuron:9": "failed"}})
    cluster = trn1(tmp_path, faults)
    try:
        # 1: lost, p1 shrinks to 14 NeuronCores in Ray's view.
        until(lambda: settled_at(cluster, 14), 120)

        # 3: by hand, the check's outcome is the exit status; a served device is refused.
        by_hand = cluster.cli("health", "check", "neuron:9", "--json")
        assert by_hand.returncode == 1 and json.loads(by_hand.stdout)["outcome"] == "failed", by_hand.stderr
        served = cluster.cli("health", "check", "neuron:0")
        assert served.returncode == 2 and "neuron:0" in served.stderr, served.stderr

        # top lists it unhealthy, out of service, with its last check (kept by the decider at its next poll).
        def listed() -> dict[str, Any] | None:
            proc = cluster.cli("top", "--once", "--json")
            assert proc.returncode == 0, proc.stderr[-2000:]
            rows = [d for d in json.loads(proc.stdout)["devices"] if d["id"] == "neuron:9"]
            return rows[0] if rows and rows[0].get("check") else None

        row = until(listed, 60, every_s=1)
        assert row["health_state"] == "unhealthy" and row["healthy"] is False and row["out_of_service"]
        assert row["check"]["outcome"] == "failed" and row["partition"] == "p1"
        # A real Prometheus scrape: ray_accel_device_healthy 0 for it.
        with running_prometheus(sd_file(cluster)) as prom:
            prom.wait_for_targets(required=metrics_targets(cluster), timeout_s=90)
            series = prom.wait_for_series('ray_accel_device_healthy{device_id="neuron:9"}', timeout_s=60)
            assert series and {value for _, value in series} == {0.0}, series
            assert {labels["partition"] for labels, _ in series} == {"p1"}, series
        write_faults(faults, {"lost": ["neuron:9"], "checks": {"neuron:9": "passed"}})
        passed = cluster.cli("health", "check", "neuron:9", "--json")
        assert passed.returncode == 0 and json.loads(passed.stdout)["outcome"] == "passed", passed.stderr

        # 1: back, its check failing: p1 stays at 14, `health --json` names the failed check.
        back = time.time()
        write_faults(faults, {"checks": {"neuron:9": "failed"}})
        stays(lambda: cores(cluster, "p1") == 14, 40)
        dev = shown(cluster, "neuron:9")
        assert dev["state"] == "healthy" and dev["check"]["outcome"] == "failed", dev
        assert dev["check"]["started"] >= back, "checked since it came back (the passed check by hand was before)"
        # Its check passing: p1 back to 16 within 60 s.
        write_faults(faults, {"checks": {"neuron:9": "passed"}})
        until(lambda: cores(cluster, "p1") == 16, 60)
        assert shown(cluster, "neuron:9")["check"]["outcome"] == "passed"

        # 2: a sticky fault cleared by hand while its check fails stays out; then passes, returns, no clear.
        write_faults(faults, {"events": [ECC], "checks": {"neuron:9": "failed"}})
        until(lambda: settled_at(cluster, 14), 120)
        cleared = time.time()
        assert cluster.cli("health", "clear", "neuron:9").returncode == 0
        until(lambda: (shown(cluster, "neuron:9").get("check") or {}).get("started", 0) >= cleared, 60)
        assert shown(cluster, "neuron:9")["check"]["outcome"] == "failed"
        stays(lambda: cores(cluster, "p1") == 14, 15)
        write_faults(faults, {"events": [ECC], "checks": {"neuron:9": "passed"}})
        until(lambda: cores(cluster, "p1") == 16, 60)

        # 5: the decider SIGKILLed while a check runs (30 s): after `start --recover`, checked again, then back.
        slow = {"neuron:9": {"outcome": "passed", "delay_s": 30}}
        write_faults(faults, {"events": [ECC, {**ECC, "seq": 1}], "checks": slow})
        until(lambda: settled_at(cluster, 14), 120)
        assert cluster.cli("health", "clear", "neuron:9").returncode == 0
        kept = cluster.state_dir / "devices.json"

        def checking() -> bool:
            devices = json.loads(kept.read_text())["devices"]
            return any(d["device_id"] == "neuron:9" and d.get("checking") for d in devices)

        until(checking, 60, every_s=0.2)
        decider = record(cluster).decider
        assert decider is not None
        os.kill(decider.pid, signal.SIGKILL)
        killed = time.time()
        until(lambda: not decider.record.alive(), 30)
        assert checking(), "the check under way is kept"
        stays(lambda: cores(cluster, "p1") == 14, 5)
        write_faults(faults, {"events": [ECC, {**ECC, "seq": 1}], "checks": {"neuron:9": "passed"}})
        recovered = run_cli("start", "--recover", "--json", env=cluster.env, timeout=300)
        assert recovered.returncode == 0, recovered.stderr[-3000:]
        until(lambda: cores(cluster, "p1") == 16, 90)
        dev = shown(cluster, "neuron:9")
        assert dev["check"]["outcome"] == "passed" and dev["check"]["started"] > killed, dev
        assert "never ended: checked again" in (cluster.state_dir / "decider.log").read_text()
    finally:
        stopped = cluster.stop()
    assert stopped.returncode == 0, stopped.stderr
    assert until(lambda: not raylet_pids(), 30)
    assert not (cluster.state_dir / "host.json").exists() and lock_is_free(cluster.state_dir)


def gpus_of(cluster: Cluster, name: str) -> float:
    try:
        return float(alive_node(cluster, name).total.get("GPU", 0))
    except ValueError:
        return -1.0


def test_a_reset_is_made_once_after_the_raylet_ended_then_checked_and_a_reboot_stays_out(tmp_path: Path) -> None:
    faults = tmp_path / "faults.json"
    write_faults(faults, {})
    spec = ClusterSpec(
        "proof-gpu",
        "p4d.24xlarge",
        2,
        start_args=(
            "--on-unhealthy",
            "shrink",
            "--health-interval",
            "1",
            "--drain-deadline",
            "10",
            "--repair",
            "reset",
        ),
        env={"RAYACCEL_MOCK_FAULTS": str(faults)},
    )
    cluster = start_cluster(tmp_path / "c", spec)
    gpus = {p["partition"]: p["device_ids"] for p in cluster.status["partitions"]}
    repairs = tmp_path / "repairs.jsonl"
    try:
        old = record(cluster).partition("p1")
        assert old is not None and old.raylet() is not None
        old_raylet = old.raylet()
        assert old_raylet is not None
        reset, reboot = gpus["p1"][0], gpus["p1"][1]
        write_faults(faults, {"events": [{"device": reset, "kind": "recovery", "code": "GPU_RESET"}]})
        # Reset once p1's old raylet has ended, then checked, then returned: p1 serves 4 GPUs again.
        until(lambda: repairs.exists() and repairs.read_text().strip(), 120)
        assert not old_raylet.record.alive(), "reset only once the raylet that served it has ended"
        until(lambda: gpus_of(cluster, "p1") == len(gpus["p1"]), 120)
        lines = [json.loads(line) for line in repairs.read_text().splitlines()]
        assert [(r["device"], r["action"], r["outcome"]) for r in lines] == [(reset, "GPU_RESET", "ok")], lines
        dev = shown(cluster, reset)
        assert dev["repair"]["outcome"] == "ok" and dev["check"]["outcome"] == "passed"
        assert dev["check"]["started"] >= lines[0]["time"], "checked after the reset"
        log = (cluster.state_dir / "decider.log").read_text()
        assert log.index(f"step repair: repairing {reset}") < log.index(f"step check: checking {reset}")

        # NODE_REBOOT: "reboot required", no reset made, the GPU stays out.
        write_faults(faults, {"events": [{"device": reboot, "kind": "recovery", "code": "NODE_REBOOT"}]})
        until(lambda: gpus_of(cluster, "p1") == len(gpus["p1"]) - 1, 120)
        until(lambda: (shown(cluster, reboot).get("repair") or {}).get("outcome") == "reboot-required", 60)
        assert shown(cluster, reboot)["repair_note"] == "reboot required"
        stays(lambda: gpus_of(cluster, "p1") == len(gpus["p1"]) - 1, 10)
        assert len(repairs.read_text().splitlines()) == 1, "no reset for a reboot"
        text = cluster.cli("health")
        assert "reboot required" in text.stdout, text.stdout
    finally:
        stopped = cluster.stop()
    assert stopped.returncode == 0, stopped.stderr
    assert until(lambda: not raylet_pids(), 30)
    assert not (cluster.state_dir / "host.json").exists() and lock_is_free(cluster.state_dir)
