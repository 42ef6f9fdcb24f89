"""Run every dashboard query against a real partitioned mock cluster and say which return data.

    python -m tests.dashboard_probe [--preset trn1.32xlarge] [--partitions 2]

Starts `ray-accel start --head` with the mock backend and the dashboard (so
Ray writes its service-discovery file), one actor holding two cores in every
partition (so there are workloads and a job), a process outside Ray that
publishes a mask (an orphan, where the backend reports those), and Prometheus
on Ray's service-discovery file. Prints one line per panel query
with the number of series it returns as the dashboard has it and, to tell a
missing host label from missing data, with the host filter relaxed
(`host=~".*"` also matches a series without a host label). Stops everything it started, by PID.
The integration test (tests/integration/test_prometheus.py) reuses the pieces.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.cli_process import ROOT, run_cli
from tests.dashboard_queries import PanelQuery, load, panel_queries
from tests.integration.cluster_harness import Cluster
from tests.prom import SD_FILE_NAME, Prometheus, running_prometheus, session_dir_of

# One actor per partition holding 2 cores, alive until killed; prints where
# each runs and the driver's job id.
HOLD = r"""
import json, os, sys, time
import ray
ray.init(address=sys.argv[1], log_to_driver=False)
parts = sys.argv[2].split(",")

@ray.remote(resources={"neuron_cores": 2}, num_cpus=0)
class Holder:
    def where(self):
        return {"pid": os.getpid(), "cores": os.environ.get("NEURON_RT_VISIBLE_CORES")}

actors = {p: Holder.options(label_selector={"ray-accel.io/partition": p}).remote() for p in parts}
where = {p: ray.get(a.where.remote()) for p, a in actors.items()}
print(json.dumps({"job_id": ray.get_runtime_context().get_job_id(), "holders": where}), flush=True)
time.sleep(float(sys.argv[3]))
"""

# A process that is no Ray worker and says it holds cores (the bridge's mask
# file, which the mock backend reads per process): an orphan for a backend
# that reports processes holding devices.
ORPHAN = r"""
import sys, time
from ray_accel.core.masks import publish as publish_mask
publish_mask(sys.argv[1])
print("ready", flush=True)
time.sleep(float(sys.argv[2]))
"""


def cluster_env(tmp: Path, preset: str) -> dict[str, str]:
    return {
        "RAYACCEL_MOCK": preset,
        "RAYACCEL_STATE_DIR": str(tmp / "state"),
        "RAYACCEL_METRICS_INTERVAL_S": "1",
        # Ray's metrics agent exports every 10 s by default.
        "RAY_metrics_report_interval_ms": "1000",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }


@contextlib.contextmanager
def metrics_cluster(tmp: Path, preset: str = "trn1.32xlarge", partitions: int = 2) -> Iterator[Cluster]:
    """A partitioned mock head with the dashboard on (Ray's SD file needs it); stopped on exit."""
    from ray_accel.cluster.host import free_port

    env = cluster_env(tmp, preset)
    # The dashboard is on by default.
    args = ("start", "--head", "--partitions", str(partitions), "--port", str(free_port()))
    proc = run_cli(*args, "--json", env=env, timeout=300)
    try:
        if proc.returncode != 0:
            raise RuntimeError(f"ray-accel start failed ({proc.returncode}): {proc.stderr[-3000:]}")
        yield Cluster(env, json.loads(proc.stdout))
    finally:
        run_cli("stop", "--grace", "2", env=env)


def sd_file(cluster: Cluster) -> Path:
    head = cluster.status["head"]
    return session_dir_of(int(head["pid"])) / SD_FILE_NAME


def metrics_targets(cluster: Cluster) -> list[str]:
    """Each partition raylet's Prometheus endpoint, as Ray lists it in the SD file."""
    state = json.loads((Path(cluster.env["RAYACCEL_STATE_DIR"]) / "host.json").read_text())
    host = cluster.address.rsplit(":", 1)[0]
    return [f"{host}:{p['ports']['named']['metrics_export_port']}" for p in state["partitions"]]


def device_owners(cluster: Cluster) -> dict[str, str]:
    return {d: p["partition"] for p in cluster.status["partitions"] for d in p["device_ids"]}


def _driver_env(cluster: Cluster) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAYACCEL_")}
    env.update(RAY_AUTH_MODE=cluster.status.get("auth_mode") or "token", PYTHONPATH=cluster.env["PYTHONPATH"])
    return env


@contextlib.contextmanager
def holders(cluster: Cluster, seconds: float = 900) -> Iterator[dict[str, Any]]:
    """{"job_id", "holders": {partition: {"pid", "cores"}}} while the holder driver runs."""
    parts = ",".join(p["partition"] for p in cluster.status["partitions"])
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, cluster.address, parts, str(seconds)],
        env=_driver_env(cluster),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"holder driver exited with {proc.wait()} before reporting")
        yield json.loads(line)
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def orphan(cluster: Cluster, cores: str, seconds: float = 900) -> Iterator[int]:
    """PID of a non-worker process that publishes `cores` as its mask, in the cluster's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAYACCEL_")}
    env.update(cluster.env)
    proc = subprocess.Popen(
        [sys.executable, "-c", ORPHAN, cores, str(seconds)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"orphan process exited with {proc.wait()} before publishing its mask")
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def probe(prom: Prometheus, dashboard: Mapping[str, Any]) -> list[tuple[PanelQuery, int, int]]:
    """(query, series as written, series with the host filter relaxed)."""
    relaxed = {q.name: q.expr for q in panel_queries(dashboard, {"host": ".*"})}
    return [(q, len(prom.query(q.expr)), len(prom.query(relaxed[q.name]))) for q in panel_queries(dashboard)]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="trn1.32xlarge")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--settle", type=float, default=20.0, help="seconds to wait for workload series")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dashboard-probe-") as tmp:
        with metrics_cluster(Path(tmp), args.preset, args.partitions) as cluster:
            print(f"cluster {cluster.address}; SD file {sd_file(cluster)}", flush=True)
            with holders(cluster) as held, orphan(cluster, "0,1") as orphan_pid:
                print(f"holders {held}; orphan pid {orphan_pid}", flush=True)
                with running_prometheus(sd_file(cluster)) as prom:
                    print(f"prometheus pid {prom.pid} at {prom.url}", flush=True)
                    targets = prom.wait_for_targets(required=metrics_targets(cluster), timeout_s=90)
                    print(f"SD file: {sd_file(cluster).read_text()}")
                    print(f"targets up: {targets}", flush=True)
                    pid = held["holders"][cluster.status["partitions"][0]["partition"]]["pid"]
                    prom.wait_for_series(f'ray_accel_workload_rss_bytes{{workload=~".*{pid}.*"}}', args.settle)
                    prom.wait_for_series("rate(ray_accel_workload_cpu_seconds[1m])", args.settle)
                    rows = probe(prom, load())
    print(f"{'panel query':34} {'as is':>5} {'host=~.*':>8}")
    for q, a, b in rows:
        print(f"{q.name:34} {a:5} {b:8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
