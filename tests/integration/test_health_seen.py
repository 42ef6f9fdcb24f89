"""A faulty device where users look: `top` (text and JSON), a real
Prometheus, and `ray-accel jobs` with why a job waits.

One cluster: a mock trn2.48xlarge in four partitions,
`--on-unhealthy drain`. Healthy, `top` shows every partition's state. Then
a fit runs on p0 and an uncorrected ECC error hits a device of p0 and one
of p1: p0 drains like any partition (the head raylet holds no devices), and
while the fit's worker keeps it busy it stays draining, the fit is preempted
and waits for p0 again, and each view says so; p1, with nothing on it,
drains and is stopped, and `top`
still shows its state (its exporter left with the drain: the host-level
exporter reports it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ray_accel.core.health_state import PartState
from tests.dashboard_probe import metrics_targets, sd_file
from tests.integration.cluster_harness import Cluster, ClusterSpec, start_cluster
from tests.integration.health_steps import (
    WAITING_FIT,
    background_driver,
    part,
    until,
    until_poll,
    waiting_fit,
    write_faults,
)
from tests.prom import Prometheus, running_prometheus

pytestmark = pytest.mark.ray

ECC = "mem_ecc_uncorrected"


def cli_json(cluster: Cluster, *args: str) -> Any:
    proc = cluster.cli(*args, "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def cli_text(cluster: Cluster, *args: str) -> str:
    proc = cluster.cli(*args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def row(text: str, first: str) -> list[str]:
    """The cells of the table row whose first cell is `first`."""
    (found,) = [line.split() for line in text.splitlines() if line.split()[:1] == [first]]
    return found


def settled(check: Callable[[], Any], timeout_s: float = 120) -> Any:
    """What `check` returns once it holds (an AssertionError meanwhile is a view not yet caught up)."""
    last: list[str] = []

    def attempt() -> Any:
        try:
            return check()
        except AssertionError as e:
            last[:] = [str(e)]
            return None

    try:
        return until(attempt, timeout_s, every_s=1)
    except AssertionError:
        raise AssertionError(f"not within {timeout_s:g}s: {last[0] if last else 'no answer'}") from None


def one_value(prom: Prometheus, promql: str) -> float:
    found = prom.wait_for_series(promql, timeout_s=60)
    assert len(found) == 1, f"{promql}: {found}"
    return found[0][1]


def test_a_faulty_device_shows_in_top_prometheus_and_the_reason_a_job_waits(tmp_path: Path) -> None:
    faults = tmp_path / "faults.json"
    write_faults(faults, {})
    spec = ClusterSpec(
        "health-seen",
        "trn2.48xlarge",
        4,
        start_args=("--on-unhealthy", "drain", "--health-interval", "0.5", "--drain-deadline", "600"),
        env={
            "RAYACCEL_MOCK_FAULTS": str(faults),
            "RAYACCEL_METRICS_INTERVAL_S": "1",
            "RAY_metrics_report_interval_ms": "1000",
            "RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S": "1",
        },
        dashboard=True,  # Ray writes Prometheus's service-discovery file from it; the job store asks its state API
    )
    started = time.monotonic()
    cluster = start_cluster(tmp_path / "c", spec)
    names = ["p0", "p1", "p2", "p3"]
    bad = cluster.part("p0")["device_ids"][1]
    out = tmp_path / "fit"
    out.mkdir()
    fit = None
    try:
        # Healthy: every partition's state, in both views of `top`.
        def every_state() -> bool:
            view = cli_json(cluster, "top", "--once")
            states = {p["partition"]: (p.get("health") or {}).get("state") for p in view["partitions"]}
            assert states == dict.fromkeys(names, "serving"), states
            return True

        settled(every_state)
        text = cli_text(cluster, "top", "--once")
        assert [row(text, p)[3] for p in names] == ["serving"] * 4, text

        # One worker on p0; its restart asks for p0 again.
        fit_spec = waiting_fit("health-seen", ["p0"], {"neuron_cores": 1}, max_failures=3, steps=1, skip_if=False)
        fit = background_driver(cluster, WAITING_FIT, str(out), fit_spec, log=tmp_path / "fit.log")
        with running_prometheus(sd_file(cluster)) as prom:
            prom.wait_for_targets(required=metrics_targets(cluster), timeout_s=90)
            until(lambda: (out / "ws1" / "rank0.json").exists() or fit.poll() is not None, 400)
            assert fit.poll() is None, (tmp_path / "fit.log").read_text()[-3000:]
            job_id = (out / "job_id").read_text()
            assert one_value(prom, f'ray_accel_device_healthy{{device_id="{bad}"}}') == 1.0

            # The faults: p0 drains, kept busy by the fit's worker; p1, with
            # nothing on it, is drained, its exporter leaves, and Ray ends it (stopped).
            worker_bad = cluster.part("p1")["device_ids"][0]
            events = [{"device": d, "kind": "ecc", "code": ECC} for d in (bad, worker_bad)]
            write_faults(faults, {"events": events})
            h = until_poll(cluster, lambda h: part(h, "p0").state is PartState.DRAINING, polls=3)
            # Under drain a worker partition goes out whole (it comes back whole or not at all).
            assert part(h, "p0").out == tuple(cluster.part("p0")["device_ids"])
            assert part(h, "p1").out == tuple(cluster.part("p1")["device_ids"])

            def top_shows_it() -> dict[str, Any]:
                view = cli_json(cluster, "top", "--once")
                (dev,) = [d for d in view["devices"] if d["id"] == bad]
                assert (dev["healthy"], dev["health_state"]) == (False, "unhealthy"), dev
                health = {p["partition"]: p.get("health") or {} for p in view["partitions"]}
                states = {p: x.get("state") for p, x in health.items()}
                assert states["p1"] in ("draining", "stopped"), health  # Ray ends an idle drained raylet soon
                assert {**states, "p1": None} == {"p0": "draining", "p1": None, "p2": "serving", "p3": "serving"}
                assert worker_bad in health["p1"]["out"] and worker_bad in health["p1"]["detail"], health
                return dict(health["p0"])

            p0 = settled(top_shows_it)
            assert p0["out"] == cluster.part("p0")["device_ids"] and bad in p0["detail"] and ECC in p0["detail"], p0
            text = cli_text(cluster, "top", "--once")
            assert row(text, "p0")[3] == "draining" and row(text, bad)[-1] == "unhealthy", text
            assert row(text, "p1")[3] in ("draining", "stopped") and row(text, "p2")[3] == "serving", text

            # A real Prometheus: the rule's verdict and the partition's state.
            assert one_value(prom, f'ray_accel_device_healthy{{device_id="{bad}"}} == 0') == 0.0
            state = f'ray_accel_device_health_state{{device_id="{bad}",state="unhealthy"}} == 1'
            assert one_value(prom, state) == 1.0
            assert one_value(prom, 'ray_accel_partition_state{partition="p0",state="draining"} == 1') == 1.0
            other = cluster.part("p2")["device_ids"][0]
            assert one_value(prom, f'ray_accel_device_healthy{{device_id="{other}"}}') == 1.0

        # The fit was preempted and waits for p0: `jobs` says why.
        def waits() -> str:
            (job,) = [j for j in cli_json(cluster, "jobs")["jobs"] if j["id"] == job_id]
            assert job["phase"] == "Restarting" and job["waiting"], job
            return str(job["waiting"])

        why = settled(waits, 180)
        assert why.startswith("p0 draining: drained to stop: ") and f"{bad}: {ECC}" in why, why
        assert f"{job_id} waits: {why}" in cli_text(cluster, "jobs")
    finally:
        if fit is not None and fit.poll() is None:
            fit.kill()
            fit.wait()
        stopped = cluster.stop()
    assert stopped.returncode == 0, stopped.stderr
    print(f"\nhealth-seen: {time.monotonic() - started:.0f} s from start to stop")
