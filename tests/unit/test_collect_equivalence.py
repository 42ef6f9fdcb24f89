"""A collection from the collector's fast path (one process table kept
across collections, reading again only what may have changed, the mock's
cached mask records and pidfd liveness checks) equals one computed from
straightforward reads: a full
`read_stat` of every process, `children_map` and `descendants`, a fresh read
of every published record checked with `ProcessRecord.alive`, and the mock's
documented rule (64 MiB per core a live process's mask names)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray_accel_mock import load_spec
from ray_accel_mock.telemetry import PROCESS_MEMORY_PER_CORE, MockTelemetry

from ray_accel.core import masks
from ray_accel.core.processes import (
    CLOCK_TICKS,
    ProcessRecord,
    ProcessTable,
    children_map,
    descendants,
    read_stat,
    snapshot,
)
from ray_accel.core.visibility import parse_visible_ids
from ray_accel.metrics.collect import Where, collect

# A stand-in raylet: workers titled as Ray titles them (argv and the kernel's
# comm), each a shell with one sleeping child, and one child that is not a worker.
RAYLET = r"""
import subprocess, sys
n = int(sys.argv[1])
script = "printf ray::IDLE > /proc/$$/comm; sleep 600 & wait"
kids = [subprocess.Popen(["ray::IDLE", "-c", script], executable="/bin/sh") for _ in range(n)]
other = subprocess.Popen(["sleep", "600"])
print(" ".join(str(k.pid) for k in kids), flush=True)
for _ in sys.stdin:  # one more worker per line
    kids.append(subprocess.Popen(["ray::IDLE", "-c", script], executable="/bin/sh"))
    print(kids[-1].pid, flush=True)
"""


def _straight(raylet: int, mine: set[str], device_of: dict[int, str]) -> tuple[dict[int, object], list[object]]:
    """Workloads (root -> [(pid, name, cpu s, rss, device memory)]) and
    orphans [(device, pid)], from plain reads."""
    stats = {s.pid: s for n in os.listdir("/proc") if n.isdigit() and (s := read_stat(int(n))) is not None}
    kids = children_map(stats.values())
    held: dict[int, dict[str, int]] = {}
    for name in os.listdir(masks.mask_dir()):
        if not name.isdigit():
            continue
        mask, start = Path(masks.mask_dir(), name).read_text().splitlines()
        if not ProcessRecord(int(name), int(start)).alive():
            continue
        for core in parse_visible_ids(mask) or []:
            device = device_of[core]
            held.setdefault(int(name), {}).setdefault(device, 0)
            held[int(name)][device] += PROCESS_MEMORY_PER_CORE
    workloads: dict[int, object] = {}
    for pid in kids.get(raylet, ()):
        if not stats[pid].name.startswith("ray::"):
            continue
        tree = [pid, *descendants(pid, kids)]
        workloads[pid] = [
            (
                p,
                stats[p].name,
                stats[p].cpu_ticks / CLOCK_TICKS,
                stats[p].rss_bytes,
                {d: b for d, b in held.get(p, {}).items() if d in mine},
            )
            for p in tree
        ]
    in_tree = {raylet, *descendants(raylet, kids)}
    orphans = sorted((d, pid) for pid, h in held.items() for d in h if d in mine and pid not in in_tree)
    return workloads, orphans  # type: ignore[return-value]


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test starts, each in its own session: every one's whole group is killed after."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def test_the_fast_collection_equals_the_straightforward_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started: list[subprocess.Popen[str]]
) -> None:
    monkeypatch.setenv(masks.MASK_DIR_ENV, str(tmp_path))
    telemetry = MockTelemetry(load_spec("trn1.32xlarge"))
    devices = telemetry.spec.devices[:8]  # p0: neuron:0-7, cores 0-15
    mine = {d.id for d in devices}
    device_of = {c: d.id for d in telemetry.spec.devices for c in d.core_ids}
    raylet = subprocess.Popen(
        [sys.executable, "-c", RAYLET, "6"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    started.append(raylet)
    outsiders = [subprocess.Popen(["sleep", "600"], text=True, start_new_session=True) for _ in range(2)]
    started.extend(outsiders)
    assert raylet.stdout is not None
    workers = [int(p) for p in raylet.stdout.readline().split()]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until every shell has its sleep
        kids = children_map(snapshot().values())
        if all(kids.get(w) for w in workers):
            break
        time.sleep(0.05)
    for i, pid in enumerate(workers[:4]):  # two workers hold nothing
        record = ProcessRecord.of(pid)
        assert record is not None
        Path(tmp_path, str(pid)).write_text(f"{2 * i},{2 * i + 1}\n{record.start_ticks}\n")
    for pid, mask in ((outsiders[0].pid, "3"), (outsiders[1].pid, "20")):  # p0's orphan; another partition's
        record = ProcessRecord.of(pid)
        assert record is not None
        Path(tmp_path, str(pid)).write_text(f"{mask}\n{record.start_ticks}\n")
    Path(tmp_path, "999999999").write_text("0\n1\n")  # a dead writer's record

    table = ProcessTable()  # as an exporter keeps it

    def agree(expected_orphans: list[tuple[str, int]]) -> None:
        for _ in range(5):  # a process may still use a CPU tick while starting: read until still
            before = _straight(raylet.pid, mine, device_of)
            snap = collect(telemetry, devices, "trn1", raylet.pid, (), table.read(raylet.pid), Where("h", "n", "p0"))
            workloads, orphans = _straight(raylet.pid, mine, device_of)
            if (workloads, orphans) == before:
                break
        assert {
            w.pid: [(p.pid, p.name, p.cpu_seconds, p.rss_bytes, p.device_memory_bytes) for p in w.processes]
            for w in snap.workloads
        } == workloads
        assert [(o.device_id, o.pid) for o in snap.orphans] == orphans == expected_orphans
        assert sorted(workloads) == sorted(workers)
        assert sum(bool(w.device_memory_bytes) for w in snap.workloads) == 4

    def settle() -> None:
        time.sleep(masks.SETTLED_NS / 1e9 * 1.5)
        collect(telemetry, devices, "trn1", raylet.pid, (), table.read(raylet.pid), Where("h", "n", "p0"))

    agree([("neuron:1", outsiders[0].pid)])  # the first reading
    settle()
    agree([("neuron:1", outsiders[0].pid)])  # the kept one, the dead writer's record still in it
    Path(tmp_path, "999999999").unlink()
    settle()
    agree([("neuron:1", outsiders[0].pid)])  # every record's writer alive
    outsiders[0].kill()
    while (ended := read_stat(outsiders[0].pid)) is not None and ended.state != "Z":
        time.sleep(0.01)
    agree([])  # its record kept, and a zombie holds nothing: liveness is checked on every collection
    outsiders[0].wait()
    agree([])  # reaped
    assert raylet.stdin is not None
    raylet.stdin.write("\n")
    raylet.stdin.flush()
    workers.append(int(raylet.stdout.readline()))
    while not children_map(snapshot().values()).get(workers[-1]) and time.monotonic() < deadline + 30:
        time.sleep(0.05)
    agree([])  # a worker that began after the table was first read
