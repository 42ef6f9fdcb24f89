"""The decider's shrink and return killed at each of their named steps, then
`start --recover`: on a mock trn1.32xlarge in two partitions under
`--on-unhealthy shrink`, a fatal fault on neuron:9 shrinks p1 and `health
clear neuron:9` returns it, in turn; before each, the decider is started
again with the failpoint at the next step, so it SIGKILLs itself there.
After each crash, `start --recover` finishes the change within 90 s, and
once the decider has gone on every invariant of the host holds
(`host_invariants.check_invariants`)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from ray_accel.core.health_state import PartState
from ray_accel.hostops import steps
from ray_accel.hostops.steps import CRASH_ENV
from tests.cli_process import run_cli
from tests.integration.cluster_harness import Cluster, ClusterSpec, raylet_pids, start_cluster
from tests.integration.health_steps import alive_node, lock_is_free, record, until, write_faults
from tests.integration.host_invariants import check_invariants, recovered

pytestmark = pytest.mark.ray

DEVICES = [f"neuron:{i}" for i in range(16)]
SPLIT = {"p0": tuple(DEVICES[:8]), "p1": tuple(DEVICES[8:])}
# The steps of the decider's shrink and of its return: its own drain, then those of the restart.
DECIDER_STEPS = (steps.DRAIN, steps.PLANNED, steps.STOP, steps.LAUNCH, steps.REGISTER, steps.FINISH)


def _armed(cluster: Cluster, step: str | None) -> None:
    """The decider started again, by `start --recover`, with the failpoint at `step` (None: none)."""
    decider = record(cluster).decider
    if decider is not None and decider.record.alive():
        os.kill(decider.pid, signal.SIGKILL)
        until(lambda: not decider.record.alive(), 30)
    env = {**cluster.env, **({CRASH_ENV: step} if step else {})}
    proc = run_cli("start", "--recover", "--json", env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _died_at(cluster: Cluster, step: str) -> None:
    """Until the decider has killed itself at `step` (its log says the step; it is gone)."""
    log = cluster.state_dir / "decider.log"
    decider = record(cluster).decider
    assert decider is not None
    until(lambda: f"step {step}:" in log.read_text() and not decider.record.alive(), 120)


def _state(cluster: Cluster, name: str) -> PartState:
    found = record(cluster).partition(name)
    assert found is not None
    return found.health.state


def test_a_shrink_and_a_return_killed_at_each_step_are_finished_by_recover(tmp_path: Path) -> None:
    faults = tmp_path / "faults.json"
    write_faults(faults, {})
    spec = ClusterSpec(
        "crash-health",
        "trn1.32xlarge",
        2,
        start_args=("--on-unhealthy", "shrink", "--health-interval", "0.5", "--drain-deadline", "10"),
        env={"RAYACCEL_MOCK_FAULTS": str(faults), "RAYACCEL_METRICS_INTERVAL_S": "1"},
    )
    cluster = start_cluster(tmp_path / "c", spec)
    try:
        for seq, step in enumerate(DECIDER_STEPS):
            # The shrink, killed at `step`.
            _armed(cluster, step)
            fault = {"device": "neuron:9", "kind": "ecc", "code": "mem_ecc_uncorrected", "seq": seq}
            write_faults(faults, {"events": [fault]})
            _died_at(cluster, step)
            took, _ = recovered(cluster)
            assert took < 90, f"recover after a shrink killed at {step} took {took:.0f}s"
            until(lambda: _state(cluster, "p1") is PartState.SHRUNK and record(cluster).change is None, 90)
            assert until(lambda: alive_node(cluster, "p1").total["neuron_cores"] == 14, 30)
            check_invariants(cluster, DEVICES, SPLIT)
            # Its return, killed at `step`.
            _armed(cluster, step)
            cleared = cluster.cli("health", "clear", "neuron:9", "--json")
            assert cleared.returncode == 0, cleared.stderr
            _died_at(cluster, step)
            took, _ = recovered(cluster)
            assert took < 90, f"recover after a return killed at {step} took {took:.0f}s"
            until(lambda: _state(cluster, "p1") is PartState.SERVING and record(cluster).change is None, 90)
            assert until(lambda: alive_node(cluster, "p1").total["neuron_cores"] == 16, 30)
            check_invariants(cluster, DEVICES, SPLIT)
    finally:
        stopped = cluster.stop()
    assert stopped.returncode == 0, stopped.stderr
    assert until(lambda: not raylet_pids(), 30)
    assert not (cluster.state_dir / "host.json").exists() and lock_is_free(cluster.state_dir)
