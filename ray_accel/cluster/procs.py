"""Stopping exactly the processes we started: by PID, checked against the
kernel start time recorded with it (PIDs are reused), with their descendants."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from ray_accel.core.processes import ProcessRecord, children_map, descendants, read_stat, snapshot


def alive(record: ProcessRecord) -> bool:
    return record.alive()


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except OSError:
        return False


def terminate(records: Iterable[ProcessRecord], grace_s: float = 5.0) -> list[int]:
    """SIGTERM the recorded processes that are still those processes, and their
    descendants; SIGKILL what is left after `grace_s`. Returns the PIDs signalled."""
    live = [r for r in records if r.alive()]
    if not live:
        return []
    kids = children_map(snapshot().values())
    targets: dict[int, ProcessRecord] = {}
    for r in live:
        targets[r.pid] = r
        for pid in descendants(r.pid, kids):
            child = ProcessRecord.of(pid)
            if child is not None:
                targets.setdefault(pid, child)
    never = {1} | _ancestors()
    signalled = [pid for pid, r in targets.items() if pid not in never and r.alive() and _signal(pid, signal.SIGTERM)]
    deadline = time.monotonic() + max(0.0, grace_s)
    while time.monotonic() < deadline and any(targets[p].alive() for p in signalled):
        time.sleep(0.05)
    left = [p for p in signalled if targets[p].alive()]
    for pid in left:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(targets[p].alive() for p in left):
        time.sleep(0.05)
    return sorted(signalled)


def partition_records(
    part: Mapping[str, Any], kinds: Collection[str] | None = None, exclude: Collection[str] = ()
) -> list[ProcessRecord]:
    """The recorded processes of one partition's raylet, by kind (raylet,
    gcs_server, ...): all of them, only `kinds`, or all but `exclude`."""
    pids = part.get("pids", {})
    return [
        r
        for kind, raw in pids.items()
        if (kinds is None or kind in kinds) and kind not in exclude
        for r in parse_records(raw)
    ]


def parse_records(raw: object) -> list[ProcessRecord]:
    """`[[pid, start_ticks], ...]` from a state record, or ValueError."""
    if not isinstance(raw, list):
        raise ValueError(f"expected a list of [pid, start_ticks], got {type(raw).__name__}")
    out = []
    for item in raw:
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in item)
            or item[0] <= 1
            or item[1] < 0
        ):
            raise ValueError(f"bad process entry {item!r}: expected [pid > 1, start_ticks >= 0]")
        out.append(ProcessRecord(item[0], item[1]))
    return out


def _ancestors() -> set[int]:
    """This process and every process above it: never ours to signal."""
    out, pid = set(), os.getpid()
    while pid > 0 and pid not in out:
        out.add(pid)
        stat = read_stat(pid)
        pid = stat.ppid if stat is not None else 0
    return out
