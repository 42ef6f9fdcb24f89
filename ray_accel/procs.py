"""Stopping exactly the processes we started: by PID, checked against the
creation time recorded with it (PIDs are reused), with their descendants."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import psutil

PidRecord = Sequence[float]  # [pid, create_time]


def _verified(record: PidRecord) -> psutil.Process | None:
    pid, created = int(record[0]), float(record[1])
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - created) > 0.5 or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except psutil.Error:
        return None


def alive(record: PidRecord) -> bool:
    return _verified(record) is not None


def terminate(records: Iterable[PidRecord], grace_s: float = 5.0) -> list[int]:
    """SIGTERM the recorded processes and their descendants, SIGKILL what is
    left after `grace_s`. Returns the PIDs that were signalled."""
    procs: dict[int, psutil.Process] = {}
    for r in records:
        proc = _verified(r)
        if proc is None:
            continue
        procs[proc.pid] = proc
        try:
            for child in proc.children(recursive=True):
                procs.setdefault(child.pid, child)
        except psutil.Error:
            pass
    for p in procs.values():
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, left = psutil.wait_procs(list(procs.values()), timeout=grace_s)
    for p in left:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(left, timeout=5)
    return sorted(procs)
