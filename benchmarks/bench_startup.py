"""Questions: how long until 4 partitions are registered, with `ray-accel start`
against the way users split a node today (4 hand-written `ray start` commands
with masks, run one after the other)? And what does Ray's dashboard (on by
default, as with `ray start --head`) cost in start time and resident memory?

Node: mock trn1.32xlarge split into 4 (8 cores each). Every side uses the same
port blocks, 1 CPU and 1 GiB of object store per raylet (ray-accel is given
the host figures `-- --num-cpus 4 --object-store-memory 4 GiB`, which it
divides by 4). The baseline runs each `ray start` with `--block` in the
background and waits for its node to register before the next (the same order
and timing as sequential non-blocking commands); `--block` makes each command
own its processes, so the benchmark stops them by PID. Resident memory is the
sum of RSS over every process the start left running (and their children),
taken once all partitions are registered; for the baseline that includes the
4 blocking `ray start` processes. Medians of several runs.

    python benchmarks/bench_startup.py [--runs 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ray_accel.cli.render import render
from ray_accel.cluster import auth
from ray_accel.cluster.gcs import gcs_nodes
from ray_accel.cluster.ports import free_port, plan_ports
from ray_accel.cluster.startargs import port_args

BIN = Path(sys.executable).parent
PARTITIONS = 4
HOST_FIGURES = ["--", "--num-cpus", str(PARTITIONS), "--object-store-memory", str(PARTITIONS << 30)]


def tree_rss(pids: list[int]) -> int:
    """Bytes resident in `pids` and all their descendants, each counted once."""
    seen: dict[int, int] = {}
    for pid in pids:
        try:
            root = psutil.Process(pid)
            for p in [root, *root.children(recursive=True)]:
                if p.pid not in seen:
                    seen[p.pid] = p.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return sum(seen.values())


def run_ray_accel(metrics: bool, dashboard: bool) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as state:
        env = {**os.environ, "RAYACCEL_MOCK": "trn1.32xlarge", "RAYACCEL_STATE_DIR": state}
        extra = ([] if metrics else ["--no-metrics"]) + ([] if dashboard else ["--no-dashboard"])
        start = time.perf_counter()
        proc = subprocess.run(
            [
                str(BIN / "ray-accel"),
                "start",
                "--head",
                "--partitions",
                str(PARTITIONS),
                "--port",
                str(free_port()),
                *extra,
                *HOST_FIGURES,
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        took = time.perf_counter() - start
        rss = 0
        if proc.returncode == 0:
            record = json.loads((Path(state) / "node.json").read_text())
            rss = tree_rss([r[0] for p in record["partitions"] for rs in p["pids"].values() for r in rs])
        subprocess.run([str(BIN / "ray-accel"), "stop", "--grace", "2"], env=env, capture_output=True)
        if proc.returncode != 0:
            raise SystemExit(f"ray-accel start failed: {proc.stderr[-2000:]}")
        return took, rss


def run_hand_written() -> tuple[float, int]:
    port = free_port()
    blocks = plan_ports(PARTITIONS, None)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAYACCEL_")}
    scratch = tempfile.TemporaryDirectory()  # the same token `ray-accel start` would use or make
    cluster_auth = auth.resolve(os.environ, Path(scratch.name), create=True)
    env.update(cluster_auth.env())
    from ray.util import get_node_ip_address

    address = f"{get_node_ip_address()}:{port}"  # as Ray writes it (the hostname may resolve to 127.0.0.1)
    procs: list[subprocess.Popen[bytes]] = []
    start = time.perf_counter()
    try:
        for i, ports in enumerate(blocks):
            cores = ",".join(str(c) for c in range(i * 8, (i + 1) * 8))
            args = [str(BIN / "ray"), "start", "--block", "--disable-usage-stats", "--num-cpus", "1"]
            args += (
                ["--head", "--port", str(port), "--include-dashboard", "false"] if i == 0 else ["--address", address]
            )
            args += port_args(ports, head=i == 0)
            args += ["--resources", json.dumps({"neuron_cores": 8}), "--object-store-memory", str(1 << 30)]
            args += ["--labels", f"ray-accel.io/partition=p{i}"]
            procs.append(
                subprocess.Popen(
                    args,
                    env={**env, "NEURON_RT_VISIBLE_CORES": cores},
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            while True:  # this command is "done" once its node is registered
                nodes = gcs_nodes(address, 2.0, cluster_auth) or {}
                if sum(1 for n in nodes.values() if n["alive"]) >= i + 1:
                    break
                if procs[-1].poll() is not None:
                    raise SystemExit(f"ray start #{i} exited with {procs[-1].returncode}")
                time.sleep(0.1)
        took = time.perf_counter() - start
        return took, tree_rss([p.pid for p in procs])
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        # `ray start --head` leaves Ray's current-cluster file naming it; a
        # later plain ray.init() would try to join the stopped cluster.
        from ray._common.utils import get_ray_address_file

        address_file = Path(get_ray_address_file(None))
        if address_file.exists() and address_file.read_text().strip() == address:
            address_file.unlink()
        scratch.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    methods: list[tuple[str, Callable[[], tuple[float, int]]]] = [
        ("ray-accel start --no-metrics --no-dashboard", lambda: run_ray_accel(metrics=False, dashboard=False)),
        ("ray-accel start --no-metrics (dashboard on)", lambda: run_ray_accel(metrics=False, dashboard=True)),
        ("ray-accel start (dashboard + metrics)", lambda: run_ray_accel(metrics=True, dashboard=True)),
        ("4 sequential `ray start` with masks, no dashboard", run_hand_written),
    ]
    runs: dict[str, list[tuple[float, int]]] = {name: [] for name, _ in methods}
    for _ in range(args.runs):
        for name, fn in methods:  # interleaved, so drift in the machine hits every method alike
            runs[name].append(fn())
    rows: list[dict[str, Any]] = [
        {
            "method": name,
            "median_s": statistics.median(t for t, _ in runs[name]),
            "median_rss_mib": statistics.median(r for _, r in runs[name]) / 2**20,
            "runs_s": [t for t, _ in runs[name]],
        }
        for name, _ in methods
    ]
    off, on, _, base = rows
    ratios = {
        "dashboard_time_on_over_off": on["median_s"] / off["median_s"],
        "dashboard_rss_on_over_off": on["median_rss_mib"] / off["median_rss_mib"],
        "baseline_time_over_ray_accel": base["median_s"] / off["median_s"],
    }
    if args.json:
        print(json.dumps({"partitions": PARTITIONS, "rows": rows, **ratios}, indent=2))
        return
    print(
        f"time until {PARTITIONS} partitions are registered, and resident memory then "
        f"(mock trn1.32xlarge, {os.cpu_count()} cores), median of {args.runs} runs"
    )
    print(
        render(
            ["METHOD", "MEDIAN", "RSS", "RUNS"],
            [
                [
                    r["method"],
                    f"{r['median_s']:.1f} s",
                    f"{r['median_rss_mib']:.0f} MiB",
                    " ".join(f"{x:.1f}" for x in r["runs_s"]),
                ]
                for r in rows
            ],
        )
    )
    print(
        f"dashboard on / off: {ratios['dashboard_time_on_over_off']:.2f}x the time, "
        f"{ratios['dashboard_rss_on_over_off']:.2f}x the resident memory"
    )
    print(
        f"ray-accel start (no metrics, no dashboard) is {ratios['baseline_time_over_ray_accel']:.2f}x "
        "the speed of the hand-written baseline"
    )


if __name__ == "__main__":
    main()
