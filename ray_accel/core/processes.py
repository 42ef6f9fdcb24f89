"""Processes as `/proc` shows them: one liveness check and one tree walk for every layer.

PIDs are reused, so a PID names "our" process only together with the start
time recorded with it. The start time is the kernel's own: field 22 of
``/proc/<pid>/stat``, in clock ticks since boot (proc(5)). Unlike a wall-clock
start time it cannot drift with clock adjustments, so it is compared exactly.
A zombie counts as gone: it holds no device and runs no code, and PID 1 in a
container may never reap it.

Everything is read with one ``read()`` of one small file per process, which is
also what the metrics collector needs (CPU time and resident memory).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
PROC = "/proc"


class ProcStat(NamedTuple):
    pid: int
    name: str  # the kernel's comm (at most 15 characters)
    state: str
    ppid: int
    pgrp: int  # process group: a launcher's group holds every process it started
    cpu_ticks: int  # user + system, this process only
    start_ticks: int
    rss_bytes: int


def read_stat(pid: int, proc: str = PROC) -> ProcStat | None:
    """The process's stat line, or None if it is gone (or unreadable)."""
    try:
        fd = os.open(f"{proc}/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        raw = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    # comm may hold spaces and ')': it ends at the LAST ')'.
    head, _, rest = raw.decode("utf-8", "replace").rpartition(")")
    fields = rest.split()
    if len(fields) < 22:
        return None
    try:
        return ProcStat(
            pid=pid,
            name=head.partition("(")[2],
            state=fields[0],
            ppid=int(fields[1]),
            pgrp=int(fields[2]),
            cpu_ticks=int(fields[11]) + int(fields[12]),
            start_ticks=int(fields[19]),
            rss_bytes=int(fields[21]) * PAGE_SIZE,
        )
    except ValueError:
        return None


# argv of Ray's processes holds a long base64 config; what identifies a process
# (the executable, the interpreter's script or module) comes first.
CMDLINE_LIMIT = 64 * 1024


def read_cmdline(pid: int, proc: str = PROC) -> list[str] | None:
    """The process's argv (bounded: the first `CMDLINE_LIMIT` bytes), or None
    if it is gone or unreadable. A kernel thread has an empty one."""
    try:
        fd = os.open(f"{proc}/{pid}/cmdline", os.O_RDONLY)
    except OSError:
        return None
    try:
        raw = os.read(fd, CMDLINE_LIMIT)
    except OSError:
        return None
    finally:
        os.close(fd)
    parts = raw.split(b"\0")
    if parts[-1] == b"":
        parts.pop()  # argv ends with a NUL; a rewritten title may not
    return [a.decode("utf-8", "replace") for a in parts]


def owner(pid: int, proc: str = PROC) -> int | None:
    """The real user id that owns the process, or None if it is gone."""
    try:
        return os.stat(f"{proc}/{pid}").st_uid
    except OSError:
        return None


def all_pids(proc: str = PROC) -> list[int]:
    try:
        return [int(n) for n in os.listdir(proc) if n.isdigit()]
    except OSError:
        return []


@dataclass(frozen=True)
class ProcessRecord:
    """A process as it was when recorded: its PID and its kernel start time."""

    pid: int
    start_ticks: int

    @classmethod
    def of(cls, pid: int | None = None) -> ProcessRecord | None:
        stat = read_stat(os.getpid() if pid is None else pid)
        return None if stat is None else cls(stat.pid, stat.start_ticks)

    def current(self) -> ProcStat | None:
        """The live process this record names, or None if it ended (or the PID was reused)."""
        stat = read_stat(self.pid)
        if stat is None or stat.start_ticks != self.start_ticks or stat.state in ("Z", "X"):
            return None
        return stat

    def alive(self) -> bool:
        return self.current() is not None

    def to_json(self) -> list[int]:
        return [self.pid, self.start_ticks]


def children_map(stats: Iterable[ProcStat]) -> dict[int, list[int]]:
    """Parent PID -> child PIDs, from one pass over the process table."""
    kids: dict[int, list[int]] = {}
    for s in stats:
        kids.setdefault(s.ppid, []).append(s.pid)
    return kids


def descendants(pid: int, kids: Mapping[int, Sequence[int]]) -> list[int]:
    """Every PID below `pid`, parents before children."""
    out: list[int] = []
    stack = list(kids.get(pid, ()))
    while stack:
        child = stack.pop()
        out.append(child)
        stack.extend(kids.get(child, ()))
    return out


def snapshot(proc: str = PROC) -> dict[int, ProcStat]:
    """Every process that could be read, by PID."""
    out = {}
    for pid in all_pids(proc):
        stat = read_stat(pid, proc)
        if stat is not None:
            out[pid] = stat
    return out
