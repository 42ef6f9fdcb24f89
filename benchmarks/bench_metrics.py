"""Question: what does one full metrics collection cost, against the number of
devices and of workload processes, and how close is it to the floor: reading
`/proc/<pid>/stat` and `/proc/<pid>/statm` of the same processes and nothing else?

A collection is what an exporter does per sample (`ray_accel.metrics.collect.collect`):
its partition's devices (mock p5.48xlarge: 8 GPUs; mock trn2.48xlarge: 16
devices), the raylet's workers found in the process table, each worker's whole
process tree with CPU time, RSS and device memory, and the processes holding
its devices that are not the raylet's (orphans). The "raylet" is a stand-in
process whose N children are titled `ray::IDLE` as Ray titles its workers,
in argv and in the kernel's comm (`sh`, each with one `sleep` child, so 2N
workload processes). A title as short as `ray::IDLE` is whole in the stat
line; a worker whose title is 15 characters or more (a long task name) costs
one more read (`cmdline`) per worker, not measured here. With `masks`,
each worker has published its mask as the bridge does for every Ray worker
(in a temporary RAYACCEL_MASK_DIR), so the mock backend attributes device
memory to it; without, no process holds a device. As an exporter's telemetry
does, the mock keeps the records it read, and what they hold, and reads them
again only when the directory changed (every publish renames a file into it)
or changed less than `masks.SETTLED_NS` ago, and checks every record's
writer through a pidfd it opened when it first saw the record. So the
collections within `masks.SETTLED_NS` of the publish read every record; the
benchmark waits that long first and measures the steady state of workers
whose masks have not changed since (an exporter samples every few seconds).

As an exporter does, the benchmark keeps one process table across its
collections (`ProcessTable.read`): each lists `/proc` unless no task began or
ended on the host since the last listing (`/proc/loadavg` says), and reads the
stat line of the raylet's whole tree, of each process that began since the
last one and of each whose parent ended; a line of any other process is kept,
and a line the same as the last read's is not parsed again. The PROC
TABLE column says how many stat lines a measured collection read (the most
any one read), of how many processes listed: the benchmark's and all others.

Two baselines, each timed in the same loop as the collection, interleaved
and alternating which runs first; each ratio is the median of each repeat's
ratio, the times the medians of --repeats runs, all in CPU time of this
process (`time.process_time`: the kernel's work in its reads counts, other
processes' load does not):

- FLOOR (the target's): reading `/proc/<pid>/stat` and `/proc/<pid>/statm`
  of the 2N workload processes and nothing else (`os.open` + `os.read` +
  `os.close`, bytes paths): what it costs at least to look at the processes
  the collection reports.
- TABLE FLOOR: list `/proc` and read each listed process's `stat` once and
  nothing else: what a collection that read the whole table every time (as
  an exporter's first does) would cost at least, and so what keeping the
  table saves. No file is read per worker beyond the table: the stat line
  holds the comm, the CPU time and the RSS, and the mock reads its mask
  records only when their directory changed.

    python benchmarks/bench_metrics.py [--repeats 30] [--quick] [--json]

Target: at 128 and at 512 workload processes (64 and 256 workers),
collection/FLOOR at most 1.2; the last lines say whether each such row meets
it (a statement, not an assertion: the script never fails on a figure).

`--quick`: 3 repeats, the same rows (for CI: it keeps the code path working).
Ctrl-C or SIGTERM kills each stand-in raylet's whole session (it started
them) before it exits 130.
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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ray_accel_mock import MockPlugin, load_spec

from benchmarks.harness import run_main, shielded
from ray_accel.cli.render import render
from ray_accel.core import masks
from ray_accel.core.processes import ProcessRecord, ProcessTable, children_map, descendants, snapshot
from ray_accel.metrics.collect import Snapshot, Where, collect

TARGET_PROCESSES = (128, 512)
TARGET_RATIO = 1.2

# The stand-in raylet: N workers titled like Ray's, each a shell with one child.
RAYLET = r"""
import subprocess, sys
n = int(sys.argv[1])
# Ray's setproctitle sets the kernel's comm too, as this does.
script = "printf ray::IDLE > /proc/$$/comm; sleep 600 & wait"
kids = [subprocess.Popen(["ray::IDLE", "-c", script], executable="/bin/sh") for _ in range(n)]
print(" ".join(str(k.pid) for k in kids), flush=True)
sys.stdin.read()
"""


@contextmanager
def fake_raylet(n: int) -> Iterator[tuple[int, list[int], list[int]]]:
    """(raylet pid, worker pids, every workload pid) while it runs; its whole
    session (raylet, shells, sleeps) is killed on exit."""
    proc = subprocess.Popen(
        [sys.executable, "-c", RAYLET, str(n)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        workers = [int(p) for p in proc.stdout.readline().split()]
        deadline = time.monotonic() + 30
        while True:  # until every shell has its sleep
            kids = children_map(snapshot().values())
            tree = [p for w in workers for p in (w, *descendants(w, kids))]
            if len(tree) == 2 * n or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        yield proc.pid, workers, tree
    finally:
        with shielded():
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: exactly what it started
            proc.wait()
            gone(tree if "tree" in locals() else [])


def gone(pids: Sequence[int], timeout_s: float = 60) -> None:
    """Wait until the killed processes are reaped, so the next row's process
    table does not count them."""
    deadline = time.monotonic() + timeout_s
    while any(os.path.exists(f"/proc/{p}") for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)


def publish_for(pids: Sequence[int], cores_each: int, total_cores: int) -> None:
    """Write each worker's mask file exactly as `masks.publish` would in that worker."""
    directory = masks.mask_dir()
    os.makedirs(directory, mode=0o700, exist_ok=True)
    for i, pid in enumerate(pids):
        record = ProcessRecord.of(pid)
        assert record is not None
        first = (i * cores_each) % total_cores
        mask = ",".join(str(first + c) for c in range(cores_each))
        Path(directory, str(pid)).write_text(f"{mask}\n{record.start_ticks}\n")


def floor(paths: Sequence[bytes]) -> None:
    """The workload's stat and statm files, read and dropped (see the module docstring)."""
    opn, rd, cls, rdonly = os.open, os.read, os.close, os.O_RDONLY
    for path in paths:
        fd = opn(path, rdonly)
        try:
            rd(fd, 4096)
        finally:
            cls(fd)


def table_floor() -> None:
    """Every process's stat line, read and dropped (see the module docstring)."""
    opn, rd, cls, rdonly = os.open, os.read, os.close, os.O_RDONLY
    for name in os.listdir(b"/proc/"):
        if not name.isdigit():
            continue
        try:
            fd = opn(b"/proc/" + name + b"/stat", rdonly)
        except OSError:
            continue
        try:
            rd(fd, 4096)
        except OSError:
            continue
        finally:
            cls(fd)


def timed(fn: object, *args: object) -> float:
    start = time.process_time()
    fn(*args)  # type: ignore[operator]
    return time.process_time() - start


def measure(preset: str, n: int, with_masks: bool, repeats: int) -> dict[str, object]:
    plugin = MockPlugin(load_spec(preset))
    devices = plugin.list_devices()
    telemetry = plugin.telemetry
    accel = plugin.host_info().accelerator_type
    cores = sorted(c for d in devices for c in d.core_ids)
    with fake_raylet(n) as (raylet, workers, tree):
        paths = [f"/proc/{pid}/{f}".encode() for pid in tree for f in ("stat", "statm")]
        if with_masks:
            publish_for(workers, 1, len(cores))
            time.sleep(masks.SETTLED_NS / 1e9 * 1.5)  # the steady state (see the module docstring)
        where = Where("bench", "node", "p0")
        table = ProcessTable()  # as an exporter keeps it
        reads: list[tuple[int, int]] = []  # per collection: (stat lines read, processes listed)

        def collection() -> Snapshot:
            """What an exporter does per sample."""
            snap = collect(telemetry, devices, accel, raylet, (), table.read(raylet), where)
            reads.append((len(table.fields), len(table)))
            return snap

        snap = collection()
        assert len(snap.workloads) == n and sum(len(w.processes) for w in snap.workloads) == 2 * n, snap
        held = sum(1 for w in snap.workloads if w.device_memory_bytes)
        assert held == (n if with_masks else 0), held
        # Untimed, as the steady state is measured: the first opens of a new process's files cost
        # the floor more, and the collection after the table's first read (which read every line) more.
        floor(paths)
        collection()
        coll: list[float] = []
        low: list[float] = []
        table_low: list[float] = []
        for i in range(repeats):  # alternate which runs first: neither always follows the other
            if i % 2:
                low.append(timed(floor, paths))
                table_low.append(timed(table_floor))
            coll.append(timed(collection))
            if not i % 2:
                table_low.append(timed(table_floor))
                low.append(timed(floor, paths))
    c, fo, tf = statistics.median(coll), statistics.median(low), statistics.median(table_low)
    return {
        "host": preset,
        "devices": len(devices),
        "workloads": n,
        "processes": 2 * n,
        "masks": with_masks,
        "table_read": max(reads[1:])[0],  # the measured collections', not the first
        "table": len(table),
        "collection_ms": c * 1000,
        "floor_ms": fo * 1000,
        "ratio": statistics.median(x / y for x, y in zip(coll, low, strict=True)) if n else None,
        "table_floor_ms": tf * 1000,
        "table_ratio": statistics.median(x / y for x, y in zip(coll, table_low, strict=True)),
        "core_share_at_1hz": c,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="3 repeats, the same rows")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.repeats = 3
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-masks-") as tmp:
        os.environ[masks.MASK_DIR_ENV] = tmp
        for preset in ("p5.48xlarge", "trn2.48xlarge"):
            for n in (0, 16, 64, 256):
                for with_masks in (False, True) if n else (False,):
                    for f in Path(tmp).iterdir():
                        f.unlink()
                    rows.append(measure(preset, n, with_masks, args.repeats))
    if args.json:
        print(json.dumps({"repeats": args.repeats, "cores": os.cpu_count(), "rows": rows}, indent=2))
        return
    print(
        f"one full collection vs the floor (stat and statm of the workload) and the table floor "
        f"(a stat read of every process), CPU time, "
        f"medians of {args.repeats} interleaved runs, {os.cpu_count()} cores"
    )
    print(
        render(
            [
                "HOST",
                "DEVICES",
                "WORKLOADS",
                "PROCESSES",
                "MASKS",
                "PROC TABLE",
                "COLLECTION",
                "FLOOR",
                "RATIO",
                "TABLE FLOOR",
                "TABLE RATIO",
                "CORE AT 1 HZ",
            ],
            [
                [
                    r["host"],
                    r["devices"],
                    r["workloads"],
                    r["processes"],
                    "yes" if r["masks"] else "no",
                    f"{r['table_read']} of {r['table']}",
                    f"{r['collection_ms']:.2f} ms",
                    f"{r['floor_ms']:.2f} ms",
                    "-" if r["ratio"] is None else f"{r['ratio']:.2f}x",
                    f"{r['table_floor_ms']:.2f} ms",
                    f"{r['table_ratio']:.2f}x",
                    f"{r['core_share_at_1hz']:.2%}",
                ]
                for r in rows
            ],
        )
    )
    for r in rows:
        if r["processes"] in TARGET_PROCESSES:
            ratio = float(r["ratio"])  # type: ignore[arg-type]
            verdict = "meets" if ratio <= TARGET_RATIO else "MISSES"
            print(
                f"{r['host']}, {r['processes']} processes, masks {'yes' if r['masks'] else 'no'}: "
                f"ratio {ratio:.2f}x {verdict} the target <= {TARGET_RATIO}x "
                f"(table ratio {float(r['table_ratio']):.2f}x: against reading every process's stat)"
            )


if __name__ == "__main__":
    run_main(main)
