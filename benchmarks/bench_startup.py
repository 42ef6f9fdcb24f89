"""Question: how long until 4 partitions are registered, with `ray-accel start`
against the way users split a node today: 4 hand-written `ray start`
commands with masks, run one after the other?

Node: mock trn1.32xlarge split into 4 (8 cores each). Both sides use the same
port blocks, CPU and object-store settings. The baseline runs each `ray start`
with `--block` in the background and waits for its node to register before
the next (the same order and timing as sequential non-blocking commands);
`--block` makes each command own its processes, so the benchmark stops them
by PID. Medians of several runs.

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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ray_accel.cli.render import render
from ray_accel.cluster import auth
from ray_accel.cluster.gcs import gcs_nodes
from ray_accel.cluster.ports import free_port, plan_ports

BIN = Path(sys.executable).parent
PARTITIONS = 4


def run_ray_accel(metrics: bool) -> float:
    with tempfile.TemporaryDirectory() as state:
        env = {**os.environ, "RAYACCEL_MOCK": "trn1.32xlarge", "RAYACCEL_STATE_DIR": state}
        extra = [] if metrics else ["--no-metrics"]
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
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        took = time.perf_counter() - start
        subprocess.run([str(BIN / "ray-accel"), "stop", "--grace", "2"], env=env, capture_output=True)
        if proc.returncode != 0:
            raise SystemExit(f"ray-accel start failed: {proc.stderr[-2000:]}")
        return took


def run_hand_written() -> float:
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
            args += ports.ray_start_args(head=i == 0)
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
        return time.perf_counter() - start
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
    ours: list[float] = []
    with_metrics: list[float] = []
    base: list[float] = []
    for _ in range(args.runs):
        ours.append(run_ray_accel(metrics=False))
        with_metrics.append(run_ray_accel(metrics=True))
        base.append(run_hand_written())
    rows: list[dict[str, Any]] = [
        {"method": "ray-accel start --agents 4 --no-metrics", "median_s": statistics.median(ours), "runs": ours},
        {
            "method": "ray-accel start --agents 4 (+ metrics agents)",
            "median_s": statistics.median(with_metrics),
            "runs": with_metrics,
        },
        {"method": "4 sequential `ray start` with masks", "median_s": statistics.median(base), "runs": base},
    ]
    ratio = rows[2]["median_s"] / rows[0]["median_s"]
    if args.json:
        print(json.dumps({"partitions": PARTITIONS, "rows": rows, "speedup_vs_baseline": ratio}, indent=2))
        return
    print(
        f"time until {PARTITIONS} partitions are registered "
        f"(mock trn1.32xlarge, {os.cpu_count()} cores), {args.runs} runs"
    )
    print(
        render(
            ["METHOD", "MEDIAN", "RUNS"],
            [[r["method"], f"{r['median_s']:.1f} s", " ".join(f"{x:.1f}" for x in r["runs"])] for r in rows],
        )
    )
    print(f"ray-accel start (no metrics) is {ratio:.2f}x the speed of the hand-written baseline")


if __name__ == "__main__":
    main()
