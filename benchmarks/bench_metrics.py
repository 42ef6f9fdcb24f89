"""Question: what does one full metrics collection cost, against the number of
devices and of workload processes, and what share of a core does sampling at
1 Hz take?

A collection reads every device of a partition (mock p5.48xlarge: 8 GPUs;
mock trn2.48xlarge: 16 devices) and walks the process trees of N workers
(real `sleep` processes, each with one child, so 2N processes), asking the
plugin for each process's device memory. Median of many collections. Baseline:
the same collection with no workloads (devices only).

    python benchmarks/bench_metrics.py [--repeats 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ray_accel_mock import MockPlugin, load_spec

from ray_accel.cli.render import render
from ray_accel.metrics.collect import device_readings, workload_readings


def spawn(n: int) -> list[subprocess.Popen[bytes]]:
    # Each "worker" is a shell with one child, like a Ray worker with a subprocess.
    return [subprocess.Popen(["sh", "-c", "sleep 300 & wait"]) for _ in range(n)]


def median_latency(plugin: MockPlugin, roots: list[int], repeats: int) -> float:
    """What an exporter does per sample: its devices, then its workers' trees."""
    devices = plugin.list_devices()
    telemetry = plugin.telemetry
    mine = {d.id for d in devices}
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        device_readings(telemetry, devices, "p0", plugin.node_info().accelerator_type)
        workload_readings(telemetry, roots, "p0", mine)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for preset in ("p5.48xlarge", "trn2.48xlarge"):
        plugin = MockPlugin(load_spec(preset))
        base = median_latency(plugin, [], args.repeats)
        for n in (0, 16, 64, 256):
            procs = spawn(n)
            try:
                time.sleep(0.5)  # let the children start
                roots = [p.pid for p in procs]
                lat = median_latency(plugin, roots, args.repeats)
            finally:
                for p in procs:
                    for c in psutil.Process(p.pid).children(recursive=True):
                        c.kill()
                    p.kill()
                    p.wait()
            rows.append(
                {
                    "node": preset,
                    "devices": len(plugin.list_devices()),
                    "workloads": n,
                    "processes": 2 * n,
                    "median_ms": lat * 1000,
                    "core_share_at_1hz": lat / 1.0,
                    "vs_devices_only": lat / base,
                }
            )
    if args.json:
        print(json.dumps({"repeats": args.repeats, "cores": os.cpu_count(), "rows": rows}, indent=2))
        return
    print(f"one full collection, median of {args.repeats}; baseline: the same node with no workloads")
    print(
        render(
            ["NODE", "DEVICES", "WORKLOADS", "PROCESSES", "MEDIAN", "CORE AT 1 HZ", "VS DEVICES ONLY"],
            [
                [
                    r["node"],
                    r["devices"],
                    r["workloads"],
                    r["processes"],
                    f"{r['median_ms']:.2f} ms",
                    f"{r['core_share_at_1hz']:.2%}",
                    f"{r['vs_devices_only']:.1f}x",
                ]
                for r in rows
            ],
        )
    )


if __name__ == "__main__":
    main()
