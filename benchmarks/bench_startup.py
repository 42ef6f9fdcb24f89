"""Questions: how long until 4 partitions are registered, with `ray-accel start`
against the way users split a host today (the same layout by hand: a
device-less `ray start --head`, then 4 `ray start` commands with masks, run
one after the other)? And what does Ray's dashboard (on by
default, as with `ray start --head`) cost in start time and resident memory?

Host: mock trn1.32xlarge split into 4 (8 cores each). Every side gives each
partition's raylet a block of ports of its own, 1 CPU and 1 GiB of object store
(ray-accel is given the host figures `-- --num-cpus 4 --object-store-memory 4
GiB`, which it divides by 4), and each side's head no CPU, no device and Ray's
smallest object store (75 MiB), as ray-accel's head has. `ray-accel start` runs through its CLI, as a user runs it,
and is stopped with `ray-accel stop`. The baseline runs each `ray start` with
`--block` in the background and waits for its raylet to register before the
next (the same order and timing as sequential non-blocking commands);
`--block` makes each command own its processes, so the benchmark stops them
by PID. Resident memory is the sum of RSS over every process the start left
running (for ray-accel, every process its state record names; for the
baseline, the 4 blocking `ray start` processes and their children), taken once
all partitions are registered. Methods are interleaved run by run; medians.
A start that fails at run time (Ray 2.60 gives a raylet 30 s to register,
which a busy 2-core machine can miss; `ray-accel start` then stops what it
began, and the baseline's processes are stopped by PID) is counted in the
table's FAILED STARTS and made again, up to 3 starts per run.

    python benchmarks/bench_startup.py [--runs 3] [--partitions 4] [--quick] [--json]

`--partitions N` asks the same question of N partitions (the host's 32 cores
split N ways, each side alike). `--quick`: one run of each method, 2 partitions (for CI:
it keeps the code path working; its figures are single samples).

Ctrl-C or SIGTERM at any point stops every process this run started (by PID:
`ray-accel stop` for what `ray-accel start` started) before it exits 130.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
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

from benchmarks.harness import BIN, CliCluster, StartFailed, run_main, say, shielded, stop_ray_starts
from ray_accel.cli.render import render
from ray_accel.cluster import auth
from ray_accel.rayapi.gcs import gcs_nodes

PRESET = "trn1.32xlarge"
PARTITIONS = 4
HOST_CORES = 32
HEAD_OBJECT_STORE = 75 * 1024 * 1024  # Ray's minimum, what ray-accel's device-less head gets
# A hand-written block per raylet, as a user would lay it out: the named
# ports, then 184 worker ports (Ray's own default range is far larger).
NAMED_PORTS = (
    "node-manager-port",
    "object-manager-port",
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "runtime-env-agent-port",
    "metrics-export-port",
)
HEAD_PORTS = ("dashboard-port", "ray-client-server-port")
WORKER_PORTS = 184
BLOCK = 16 + WORKER_PORTS
REGISTER_TIMEOUT_S = 180.0  # as `ray-accel start --timeout`'s default
TRIES = 3  # starts per run of a method before the benchmark gives up


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


def host_figures(parts: int) -> list[str]:
    """1 CPU and 1 GiB of object store per partition, given as the host's."""
    return ["--", "--num-cpus", str(parts), "--object-store-memory", str(parts << 30)]


def run_ray_accel(label: str, parts: int, metrics: bool, dashboard: bool) -> tuple[float, int]:
    extra = ([] if metrics else ["--no-metrics"]) + ([] if dashboard else ["--no-dashboard"])
    with CliCluster(PRESET, parts, [*extra, *host_figures(parts)]) as cluster:
        say(f"{label}: starting (state directory {cluster.state})")
        took = cluster.start()
        say(f"{label}: {parts} partitions up in {took:.1f} s")
        rss = tree_rss(cluster.recorded_pids())
    say(f"{label}: stopped")
    return took, rss


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def hand_written_ports(n: int) -> list[list[str]]:
    """`ray start` port flags for `n` raylets: consecutive blocks from the
    first base (21000, 22000, ...) where every port is free."""
    for base in range(21000, 65535 - n * BLOCK, 1000):
        if all(port_free(p) for p in range(base, base + n * BLOCK)):
            out = []
            for i in range(n):
                first = base + i * BLOCK
                names = NAMED_PORTS + (HEAD_PORTS if i == 0 else ())
                flags = [x for k, name in enumerate(names) for x in (f"--{name}", str(first + k))]
                flags += ["--min-worker-port", str(first + 16), "--max-worker-port", str(first + BLOCK - 1)]
                out.append(flags)
            return out
    raise SystemExit(f"no free block of {n * BLOCK} ports from 21000")


def run_hand_written(label: str, parts: int) -> tuple[float, int]:
    port = free_port()
    blocks = hand_written_ports(parts + 1)  # the head's, then each partition's
    scratch = tempfile.TemporaryDirectory()  # the same token `ray-accel start` would use or make
    cluster_auth = auth.provide(auth.decide(os.environ, Path(scratch.name), create=True), os.environ)
    env = {**os.environ, **cluster_auth.env()}
    from ray.util import get_node_ip_address

    address = f"{get_node_ip_address()}:{port}"  # as Ray writes it (the hostname may resolve to 127.0.0.1)
    procs: list[subprocess.Popen[bytes]] = []
    say(f"{label}: starting")
    start = time.perf_counter()
    try:
        for i, ports in enumerate(blocks):
            args = [str(BIN / "ray"), "start", "--block", "--disable-usage-stats"]
            if i == 0:
                # The head, as ray-accel's: no devices, no CPUs, Ray's smallest object store.
                args += ["--head", "--port", str(port), "--include-dashboard", "false", "--num-cpus", "0"]
                args += ["--resources", "{}", "--object-store-memory", str(HEAD_OBJECT_STORE)]
                mask = {"NEURON_RT_VISIBLE_CORES": ""}
            else:
                each = HOST_CORES // parts
                cores = ",".join(str(c) for c in range((i - 1) * each, i * each))
                args += ["--address", address, "--num-cpus", "1"]
                args += ["--resources", json.dumps({"neuron_cores": each}), "--object-store-memory", str(1 << 30)]
                args += ["--labels", f"ray-accel.io/partition=p{i - 1}"]
                mask = {"NEURON_RT_VISIBLE_CORES": cores}
            args += ports
            procs.append(
                subprocess.Popen(
                    args,
                    env={**env, **mask},
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # a terminal's Ctrl-C reaches the benchmark only
                )
            )
            deadline = time.monotonic() + REGISTER_TIMEOUT_S
            auth.apply(cluster_auth)
            while True:  # this command is "done" once its node is registered
                nodes = gcs_nodes(address, 2.0) or {}
                if sum(1 for n in nodes.values() if n.alive) >= i + 1:
                    break
                if procs[-1].poll() is not None:
                    raise StartFailed(f"ray start #{i} exited with {procs[-1].returncode}")
                if time.monotonic() > deadline:
                    raise StartFailed(f"ray start #{i}: not registered within {REGISTER_TIMEOUT_S:g} s")
                time.sleep(0.1)
        took = time.perf_counter() - start
        say(f"{label}: {parts} partitions up in {took:.1f} s")
        return took, tree_rss([p.pid for p in procs])
    finally:
        with shielded():
            stop_ray_starts(procs, address)
            scratch.cleanup()
            say(f"{label}: stopped")


def run_once(label: str, fn: Callable[[str], tuple[float, int]]) -> tuple[float, int, int]:
    """(seconds, RSS, failed starts before it) of one run of a method: a
    start that fails at run time (Ray's own start can time out on a small,
    busy machine) has stopped what it began, is counted, and is made again."""
    for failed in range(TRIES):
        try:
            took, rss = fn(label)
            return took, rss, failed
        except StartFailed as e:
            say(f"{label}: start failed ({e}); {TRIES - failed - 1} more tries")
    raise SystemExit(f"{label}: {TRIES} starts in a row failed")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=PARTITIONS, help="split the host N ways (1, 2, 4 or 8)")
    ap.add_argument("--quick", action="store_true", help="one run of each method, 2 partitions")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    runs_wanted = 1 if args.quick else args.runs
    parts = 2 if args.quick else args.partitions
    if parts not in (1, 2, 4, 8):
        ap.error(f"--partitions {parts}: choose 1, 2, 4 or 8 (an even split of the host's 16 devices)")
    if runs_wanted < 1:
        ap.error(f"--runs {runs_wanted}: at least 1")
    methods: list[tuple[str, Callable[[str], tuple[float, int]]]] = [
        (
            "ray-accel start --no-metrics --no-dashboard",
            lambda label: run_ray_accel(label, parts, metrics=False, dashboard=False),
        ),
        (
            "ray-accel start --no-metrics (dashboard on)",
            lambda label: run_ray_accel(label, parts, metrics=False, dashboard=True),
        ),
        (
            "ray-accel start (dashboard + metrics)",
            lambda label: run_ray_accel(label, parts, metrics=True, dashboard=True),
        ),
        (
            f"`ray start --head` (no devices), then {parts} with masks, sequential, no dashboard",
            lambda label: run_hand_written(label, parts),
        ),
    ]
    runs: dict[str, list[tuple[float, int, int]]] = {name: [] for name, _ in methods}
    for _ in range(runs_wanted):
        for name, fn in methods:  # interleaved, so drift in the machine hits every method alike
            runs[name].append(run_once(name, fn))
    rows: list[dict[str, Any]] = [
        {
            "method": name,
            "median_s": statistics.median(t for t, _, _ in runs[name]),
            "median_rss_mib": statistics.median(r for _, r, _ in runs[name]) / 2**20,
            "runs_s": [t for t, _, _ in runs[name]],
            "failed_starts": sum(f for _, _, f in runs[name]),
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
        print(json.dumps({"partitions": parts, "runs": runs_wanted, "rows": rows, **ratios}, indent=2))
        return
    print(
        f"time until {parts} partitions are registered, and resident memory then "
        f"(mock {PRESET}, {os.cpu_count()} cores), median of {runs_wanted} run(s)"
    )
    print(
        render(
            ["METHOD", "MEDIAN", "RSS", "RUNS", "FAILED STARTS"],
            [
                [
                    r["method"],
                    f"{r['median_s']:.1f} s",
                    f"{r['median_rss_mib']:.0f} MiB",
                    " ".join(f"{x:.1f}" for x in r["runs_s"]),
                    r["failed_starts"],
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
    run_main(main)
