"""A repartition killed at each of its named steps, then `start --recover`.

On a mock trn1.32xlarge split a=0-3;b=4-7;c=8-11;d=12-15, started under a
mask that splits a device (NEURON_RT_VISIBLE_CORES=0-30: neuron:15 has only
core 30 inside), with `--port-base`, `--max-workers` and a host object store
of 600 MB, and a detached actor on a:

- a split whose new object stores would fall under Ray's 75 MiB exits 2
  naming the figure, before any drain: no raylet PID changes, no drain in
  the GCS; the same split again is "nothing to change";
- the repartition to a;b;cd (and back, in turn) is SIGKILLed, its command
  and its helper, at every step of `ray_accel.hostops.steps`; after each,
  `start --recover` finishes the change within 90 s and every invariant of
  the host holds (`host_invariants.check_invariants`: every device in one
  serving partition, a task pinned to each, the raylets exactly Ray's alive
  nodes, no core outside the mask, no two port blocks meeting, all from the
  --port-base up); the actor answers;
- new partitions that cannot start in `--timeout 1` leave their devices
  unassigned (in `status` and `status --json`), and a following repartition
  onto them succeeds;
- `stop` leaves no process, lock or record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ray_accel.hostops import steps
from tests.integration.cluster_harness import ClusterSpec, raylet_pids, start_cluster
from tests.integration.health_steps import gcs_view, lock_is_free, record, until
from tests.integration.host_invariants import ACTOR, check_invariants, devices_of, killed_at, recovered

pytestmark = pytest.mark.ray

FOUR = "a=0-3;b=4-7;c=8-11;d=12-15"
MERGED = "a=0-3;b=4-7;cd=8-15"
DEVICES = [f"neuron:{i}" for i in range(16)]
MASK = frozenset(range(31))
# Every step a repartition takes, in order (`planned` is the record before the helper's first step).
REPARTITION_STEPS = (
    steps.PLANNED,
    steps.DRAIN,
    steps.LEAVE,
    steps.WAIT,
    steps.STOP,
    steps.LAUNCH,
    steps.REGISTER,
    steps.FINISH,
)


def test_the_steps_the_docs_name_are_the_steps_taken() -> None:
    design = (Path(__file__).resolve().parents[2] / "docs" / "design.md").read_text()
    listed = [s for s in steps.STEPS if f"`{s}`" in design.split("## Host changes", 1)[-1]]
    assert listed == list(steps.STEPS) == list(REPARTITION_STEPS)


def test_a_repartition_killed_at_each_step_is_finished_by_recover(tmp_path: Path) -> None:
    spec = ClusterSpec(
        "crash-repartition",
        "trn1.32xlarge",
        4,
        start_args=("--mode", "manual", "--manual", FOUR, "--port-base", "30000", "--max-workers", "200"),
        ray_args=("--object-store-memory", "600000000"),
        env={"RAYACCEL_METRICS_INTERVAL_S": "1", "NEURON_RT_VISIBLE_CORES": "0-30"},
    )
    cluster = start_cluster(tmp_path / "c", spec)
    try:
        a = cluster.part("a")["node_id"]
        assert cluster.driver(ACTOR, "create", a) == [a]
        check_invariants(cluster, DEVICES, devices_of(FOUR), MASK)

        # Planned whole before anything is touched.
        pids = {p["partition"]: p["pid"] for p in cluster.refresh()["partitions"]}
        ten = cluster.cli("repartition", "--manual", "a=0-3;b=4-7;c0=8;c1=9;c2=10;c3=11;d0=12;d1=13;d2=14;d3=15")
        assert ten.returncode == 2 and "object store would be" in ten.stderr, ten.stderr
        assert "below Ray's minimum 78643200" in ten.stderr, ten.stderr
        assert {p["partition"]: p["pid"] for p in cluster.refresh()["partitions"]} == pids
        assert not gcs_view(cluster)[1], "no drain was asked"
        same = cluster.cli("repartition", "--manual", FOUR)
        assert same.returncode == 0 and same.stdout.strip() == "nothing to change", same.stderr

        split = FOUR
        for i, step in enumerate(REPARTITION_STEPS):
            split = MERGED if split == FOUR else FOUR
            said = killed_at(
                cluster, step, ["repartition", "--manual", split, "--drain-deadline", "30"], tmp_path / f"{i}.log"
            )
            status = json.loads(cluster.cli("status", "--json").stdout)
            change = status["change"]
            assert change is not None and change["step"] == step and not change["running"], (step, change, said)
            took, told = recovered(cluster)
            assert f"finishing the repartition interrupted at step {step}" in told, told[-2000:]
            assert took < 90, f"recover after a crash at {step} took {took:.0f}s"
            check_invariants(cluster, DEVICES, devices_of(split), MASK)
            assert cluster.driver(ACTOR, "again") == [a], f"the actor on a answers after a crash at {step}"
            assert record(cluster).partition("a").node_id == a, "a is never touched"  # type: ignore[union-attr]

        # New partitions that cannot start in time leave their devices unassigned, with their share.
        other = MERGED if split == FOUR else FOUR
        failed = cluster.cli("repartition", "--manual", other, "--drain-deadline", "30", "--timeout", "1")
        assert failed.returncode == 1 and "did not start" in failed.stderr, failed.stderr[-3000:]
        status = cluster.refresh()
        spare = sorted(d for u in status["unassigned"] for d in u["device_ids"])
        moved = sorted(d for name, ds in devices_of(other).items() if name not in ("a", "b") for d in ds)
        assert spare == moved, status["unassigned"]
        shown = cluster.cli("status")
        assert "unassigned: " in shown.stdout, shown.stdout
        check_invariants(cluster, DEVICES, {"a": devices_of(FOUR)["a"], "b": devices_of(FOUR)["b"]}, MASK)
        again = cluster.cli("repartition", "--manual", other, "--drain-deadline", "30")
        assert again.returncode == 0, again.stderr[-3000:]
        assert not cluster.refresh()["unassigned"]
        check_invariants(cluster, DEVICES, devices_of(other), MASK)
    finally:
        stopped = cluster.stop()
    assert stopped.returncode == 0, stopped.stderr
    assert until(lambda: not raylet_pids(), 30)
    assert not (cluster.state_dir / "host.json").exists() and lock_is_free(cluster.state_dir)
