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


def read_small(path: str, limit: int = 4096) -> bytes | None:
    """One read of at most `limit` bytes of a small file (a `/proc` entry, a
    mask record), or None if it is gone or unreadable: a `/proc` file is
    generated whole by the read, so one read sees one consistent version."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


# Decoded comms and states, by their bytes: a host's processes share a few
# names (every idle Ray worker is `ray::IDLE`) and a handful of states, and a
# decode costs more than a lookup. Bounded, as names are any bytes.
_COMMS: dict[bytes, str] = {}
_COMMS_MAX = 4096
_STATES = {bytes([c]): chr(c) for c in range(0x21, 0x7F)}


def comm_of(raw: bytes) -> bytes:
    """A stat line's comm: it may hold spaces and ')', so it ends at the LAST ')'."""
    return raw[raw.find(b"(") + 1 : raw.rfind(b")")]


def split_stat(raw: bytes) -> list[bytes] | None:
    """A stat line's fields as proc(5) numbers them less one (pid, "(comm)",
    state, ppid, ...; the first 24 apart, the rest as one), or None if it has
    fewer. proc(5) separates the fields by single spaces; the comm may hold
    spaces and ')', so it ends at the LAST ')'."""
    f = raw.split(b" ", 24)
    if len(f) < 24:
        return None
    cut = raw.rfind(b")")
    if len(f[0]) + len(f[1]) != cut:  # the comm holds a space: split what follows it
        if cut < 0 or len(f := [f[0], raw[raw.find(b"(") : cut + 1], *raw[cut + 2 :].split(b" ", 22)]) < 24:
            return None
    return f


def comm_name(field: bytes) -> str:
    """The comm of a stat line's "(comm)" field, decoded."""
    name = _COMMS.get(field)
    if name is None:
        name = field[1:-1].decode("utf-8", "replace")
        if len(_COMMS) >= _COMMS_MAX:
            _COMMS.clear()
        _COMMS[field] = name
    return name


def parse_stat(pid: int, raw: bytes) -> ProcStat | None:
    """A stat line (proc(5)) as a ProcStat, or None if it is malformed."""
    if (f := split_stat(raw)) is None:
        return None
    try:
        state = _STATES.get(f[2]) or f[2].decode("ascii", "replace")
        ppid, pgrp, cpu, start = int(f[3]), int(f[4]), int(f[13]) + int(f[14]), int(f[21])
        return ProcStat(pid, comm_name(f[1]), state, ppid, pgrp, cpu, start, int(f[23]) * PAGE_SIZE)
    except ValueError:
        return None


def read_stat(pid: int, proc: str = PROC) -> ProcStat | None:
    """The process's stat line, or None if it is gone (or unreadable)."""
    raw = read_small(f"{proc}/{pid}/stat")
    return None if raw is None else parse_stat(pid, raw)


# argv of Ray's processes holds a long base64 config; what identifies a process
# (the executable, the interpreter's script or module) comes first.
CMDLINE_LIMIT = 64 * 1024


def read_cmdline(pid: int, proc: str = PROC) -> list[str] | None:
    """The process's argv (bounded: the first `CMDLINE_LIMIT` bytes), or None
    if it is gone or unreadable. A kernel thread has an empty one."""
    raw = read_small(f"{proc}/{pid}/cmdline", CMDLINE_LIMIT)
    if raw is None:
        return None
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


def current(pid: int, start_ticks: int) -> ProcStat | None:
    """The process `pid` if it is still the one that started at
    `start_ticks` (else the PID was reused) and has not ended (a zombie
    holds nothing and runs nothing), else None."""
    stat = read_stat(pid)
    if stat is None or stat.start_ticks != start_ticks or stat.state in ("Z", "X"):
        return None
    return stat


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
        return current(self.pid, self.start_ticks)

    def alive(self) -> bool:
        return self.current() is not None


def children_map(stats: Iterable[ProcStat]) -> dict[int, list[int]]:
    """Parent PID -> child PIDs, from one pass over the process table."""
    kids: dict[int, list[int]] = {}
    for s in stats:
        kids.setdefault(s.ppid, []).append(s.pid)
    return kids


def descendants(pid: int, kids: Mapping[int, Sequence[int]]) -> list[int]:
    """Every PID below `pid`, parents before children."""
    first = kids.get(pid)
    if not first:
        return []
    out: list[int] = []
    stack = list(first)
    while stack:
        child = stack.pop()
        out.append(child)
        grandchildren = kids.get(child)
        if grandchildren:
            stack.extend(grandchildren)
    return out


class ProcessTable:
    """Every process of the host at one moment: one read of each stat line,
    each parsed only when asked for. Finding a tree needs every process's
    parent but the full fields of the tree's processes only, and a full
    parse costs about half as much as the read."""

    def __init__(self, lines: Mapping[int, bytes]) -> None:
        """`lines`: PID -> stat line; a line without a readable parent is left
        out (it cannot be placed in a tree)."""
        self.lines: dict[int, bytes] = {}
        self.children: dict[int, list[int]] = {}
        kept, children = self.lines, self.children
        for pid, line in lines.items():
            # Only the parent, inline (a call per line is a visible share of a
            # collection): after the comm, " S " (the one-letter state), then the parent PID.
            cut = line.rfind(b")") + 4
            end = line.find(b" ", cut)
            if cut < 4 or end < 0:
                continue
            try:
                ppid = int(line[cut:end])
            except ValueError:
                continue
            kept[pid] = line
            if ppid in children:
                children[ppid].append(pid)
            else:
                children[ppid] = [pid]

    def stat(self, pid: int) -> ProcStat | None:
        """`parse_stat` of the process's line, or None if it is not in the
        table (or it is malformed)."""
        line = self.lines.get(pid)
        return None if line is None else parse_stat(pid, line)

    def __contains__(self, pid: int) -> bool:
        return pid in self.lines

    def __len__(self) -> int:
        return len(self.lines)


def process_table(proc: str = PROC) -> ProcessTable:
    """Every process that could be read, parsed lazily. One open, read and
    close per process, every line read before any is parsed: at hundreds of
    processes the loops' own overhead is a visible share of the cost, and
    reading first is measurably faster than interleaving the two
    (`benchmarks/bench_metrics.py`)."""
    # Bytes paths: a str path is encoded again on every open.
    opn, rd, cls, rdonly, prefix = os.open, os.read, os.close, os.O_RDONLY, os.fsencode(proc) + b"/"
    try:
        names = os.listdir(prefix)
    except OSError:
        return ProcessTable({})
    lines: dict[int, bytes] = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            fd = opn(prefix + name + b"/stat", rdonly)
        except OSError:
            continue  # ended since the listing
        try:
            lines[int(name)] = rd(fd, 4096)
        except OSError:
            continue
        finally:
            cls(fd)
    return ProcessTable(lines)


def snapshot(proc: str = PROC) -> dict[int, ProcStat]:
    """Every process that could be read, by PID."""
    return {pid: stat for pid, line in process_table(proc).lines.items() if (stat := parse_stat(pid, line)) is not None}
