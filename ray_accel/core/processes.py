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

import contextlib
import contextvars
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
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


_new_tuple = tuple.__new__


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


def read_raw_stat(pid: int, proc: str = PROC) -> bytes | None:
    """The process's stat line as the kernel wrote it, or None if it is gone."""
    return read_small(f"{proc}/{pid}/stat")


def _fields_start(raw: bytes) -> int:
    """Where the fields after comm begin (comm may hold spaces and ')': it
    ends at the LAST ')'), or -1."""
    cut = raw.rfind(b")")
    return -1 if cut < 0 else cut + 2


def parent_pid(raw: bytes) -> int | None:
    """Only the parent PID of a stat line (field 4): all a tree walk needs, at
    a fraction of a full parse (the collector reads every process's line)."""
    at = _fields_start(raw)
    if at < 0:
        return None
    end = raw.find(b" ", at + 2)
    if end < 0:
        return None
    try:
        return int(raw[at + 2 : end])
    except ValueError:
        return None


class Usage(NamedTuple):
    """What a metrics reading and a liveness check need of a stat line."""

    name: str
    state: str
    cpu_ticks: int
    start_ticks: int
    rss_bytes: int


# Decoded comms and states, by their bytes: a host's processes share a few
# names (every idle Ray worker is `ray::IDLE`) and a handful of states, and a
# decode costs more than a lookup. Bounded, as names are any bytes.
_COMMS: dict[bytes, str] = {}
_COMMS_MAX = 4096
_STATES = {bytes([c]): chr(c) for c in range(0x21, 0x7F)}


def parse_usage(raw: bytes) -> Usage | None:
    """The `Usage` fields of a stat line, or None if they are malformed: what
    the collector needs of each process of every tree, with no more parsing."""
    cut = raw.rfind(b")")
    f = raw[cut + 2 :].split(None, 22)
    if cut < 0 or len(f) < 22:
        return None
    comm = raw[raw.find(b"(") + 1 : cut]
    name = _COMMS.get(comm)
    if name is None:
        name = comm.decode("utf-8", "replace")
        if len(_COMMS) >= _COMMS_MAX:
            _COMMS.clear()
        _COMMS[comm] = name
    try:
        fields = (
            name,
            _STATES.get(f[0]) or f[0].decode("ascii", "replace"),
            int(f[11]) + int(f[12]),
            int(f[19]),
            int(f[21]) * PAGE_SIZE,
        )
    except ValueError:
        return None
    # tuple.__new__ skips the NamedTuple's Python-level __new__: a collection
    # parses hundreds of lines.
    return _new_tuple(Usage, fields)


def parse_stat(pid: int, raw: bytes) -> ProcStat | None:
    """A stat line (proc(5)) as a ProcStat, or None if it is malformed: its
    `Usage` fields, and the parent and process group."""
    u = parse_usage(raw)
    if u is None:
        return None
    f = raw[raw.rfind(b")") + 2 :].split(None, 3)
    try:
        ppid, pgrp = int(f[1]), int(f[2])
    except ValueError:
        return None
    return ProcStat(pid, u.name, u.state, ppid, pgrp, u.cpu_ticks, u.start_ticks, u.rss_bytes)


def read_stat(pid: int, proc: str = PROC) -> ProcStat | None:
    """The process's stat line, or None if it is gone (or unreadable)."""
    raw = read_raw_stat(pid, proc)
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


def all_pids(proc: str = PROC) -> list[int]:
    try:
        return [int(n) for n in os.listdir(proc) if n.isdigit()]
    except OSError:
        return []


def _is_current(state: str, start_ticks: int, recorded_ticks: int) -> bool:
    """The liveness rule: the same start time (else the PID was reused), and
    not ended (a zombie holds nothing and runs nothing)."""
    return start_ticks == recorded_ticks and state != "Z" and state != "X"


def current(pid: int, start_ticks: int, table: ProcessTable | None = None) -> ProcStat | None:
    """The process `pid` if it is still the one that started at
    `start_ticks` and has not ended, else None; as `table` shows it, if given."""
    stat = read_stat(pid) if table is None else table.stat(pid)
    if stat is None or not _is_current(stat.state, stat.start_ticks, start_ticks):
        return None
    return stat


def alive(pid: int, start_ticks: int, table: ProcessTable | None = None) -> bool:
    """`current(...) is not None`, for callers that hold many records as
    plain numbers (the metrics collector checks hundreds): with a table, from
    the same parse its usage reading takes."""
    if table is None:
        return current(pid, start_ticks) is not None
    u = table.usage(pid)
    return u is not None and _is_current(u.state, u.start_ticks, start_ticks)


# The process table a caller read a moment ago, for the liveness checks of
# code it calls (`table_in_use`).
_TABLE_IN_USE: contextvars.ContextVar[ProcessTable | None] = contextvars.ContextVar("table_in_use", default=None)


@contextlib.contextmanager
def table_in_use(table: ProcessTable) -> Iterator[None]:
    """Inside the block, `alive_all` without a table answers from `table`.

    A metrics collection reads every stat line of the host once; a backend
    it calls that must tell live processes from dead ones (the mock, over
    the masks workers publish) then checks them against that reading instead
    of reading each stat line again, which would be most of a collection's
    cost. The backend needs no parameter for it."""
    token = _TABLE_IN_USE.set(table)
    try:
        yield
    finally:
        _TABLE_IN_USE.reset(token)


def alive_all(recorded: Mapping[int, int], table: ProcessTable | None = None) -> list[int]:
    """The PIDs of `recorded` (PID -> recorded start ticks) that `alive`
    answers True for, as `table` shows them if given (else as the table in
    use shows them, if any, else as `/proc` shows them now): one call for a
    collector that checks hundreds of records each sample."""
    table = table if table is not None else _TABLE_IN_USE.get()
    if table is None:
        return [pid for pid, start_ticks in recorded.items() if current(pid, start_ticks) is not None]
    return table.alive(recorded)


@dataclass(frozen=True)
class ProcessRecord:
    """A process as it was when recorded: its PID and its kernel start time."""

    pid: int
    start_ticks: int

    @classmethod
    def of(cls, pid: int | None = None) -> ProcessRecord | None:
        stat = read_stat(os.getpid() if pid is None else pid)
        return None if stat is None else cls(stat.pid, stat.start_ticks)

    def current(self, table: ProcessTable | None = None) -> ProcStat | None:
        """The live process this record names, or None if it ended (or the PID
        was reused); as `table` shows it, if given (a table the caller read
        already spares one read per record)."""
        return current(self.pid, self.start_ticks, table)

    def alive(self, table: ProcessTable | None = None) -> bool:
        return alive(self.pid, self.start_ticks, table)

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


class ProcessTable(Mapping[int, ProcStat]):
    """Every process of the host at one moment: one read of each stat line,
    each parsed only when asked for. Finding a tree needs every process's
    parent but the full fields of the tree's processes only, and a full
    parse costs about half as much as the read."""

    def __init__(self, raw: Mapping[int, bytes], children: dict[int, list[int]] | None = None) -> None:
        """`raw`: PID -> stat line; `children`: parent PID -> child PIDs of
        exactly the well-formed lines of `raw`, when the caller found them
        while reading (`process_table` does, to walk the lines once)."""
        self._parsed: dict[int, ProcStat | None] = {}
        self._usage: dict[int, Usage | None] = {}
        if children is not None:
            self._raw = dict(raw)
            self.children = children
            return
        self._raw = {}
        self.children = {}
        for pid, line in raw.items():
            ppid = parent_pid(line)
            if ppid is not None:
                self._raw[pid] = line
                self.children.setdefault(ppid, []).append(pid)

    def stat(self, pid: int) -> ProcStat | None:
        """The process's fields, or None if it is not in the table (or its line is malformed)."""
        parsed = self._parsed
        if pid in parsed:
            return parsed[pid]
        line = self._raw.get(pid)
        stat = parsed[pid] = None if line is None else parse_stat(pid, line)
        return stat

    def usage(self, pid: int) -> Usage | None:
        """`parse_usage` of the process's line (parsed once), or None if it is
        not in the table (or those fields are malformed)."""
        usage = self._usage.get(pid)
        if usage is None:
            line = self._raw.get(pid)
            if line is None:
                return None
            usage = self._usage[pid] = parse_usage(line)
        return usage

    def usages(self, pids: Iterable[int]) -> list[Usage | None]:
        """`usage` of each of `pids`, in order: one call for a whole tree."""
        known, raw = self._usage, self._raw
        out: list[Usage | None] = []
        for pid in pids:
            u = known.get(pid)
            if u is None:
                line = raw.get(pid)
                if line is not None:
                    u = known[pid] = parse_usage(line)
            out.append(u)
        return out

    def alive(self, recorded: Mapping[int, int]) -> list[int]:
        """`alive_all(recorded, self)`."""
        out = []
        for pid, u in zip(recorded, self.usages(recorded), strict=True):
            if u is not None and _is_current(u.state, u.start_ticks, recorded[pid]):
                out.append(pid)
        return out

    def __getitem__(self, pid: int) -> ProcStat:
        stat = self.stat(pid)
        if stat is None:
            raise KeyError(pid)
        return stat

    def __contains__(self, pid: object) -> bool:
        return pid in self._raw

    def __iter__(self) -> Iterator[int]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)


def process_table(proc: str = PROC) -> ProcessTable:
    """Every process that could be read, parsed lazily. One open, read and
    close per process, then the parent PID of each line: at hundreds of
    processes the loops' own overhead is a visible share of the cost, and
    reading every line first and parsing after is measurably faster than
    interleaving the two (`benchmarks/bench_metrics.py`)."""
    # Bytes paths: a str path is encoded again on every open.
    opn, rd, cls, rdonly, prefix = os.open, os.read, os.close, os.O_RDONLY, os.fsencode(proc) + b"/"
    try:
        names = os.listdir(prefix)
    except OSError:
        return ProcessTable({}, {})
    read: list[tuple[bytes, bytes]] = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            fd = opn(prefix + name + b"/stat", rdonly)
        except OSError:
            continue  # ended since the listing
        try:
            read.append((name, rd(fd, 4096)))
        except OSError:
            continue
        finally:
            cls(fd)
    raw: dict[int, bytes] = {}
    children: dict[int, list[int]] = {}
    for name, line in read:
        # parent_pid, inline: comm ends at the last ')', then " S " (the
        # one-letter state), then the parent PID.
        cut = line.rfind(b")") + 4
        end = line.find(b" ", cut)
        if cut < 4 or end < 0:
            continue
        try:
            ppid = int(line[cut:end])
        except ValueError:
            continue
        pid = int(name)
        raw[pid] = line
        if ppid in children:
            children[ppid].append(pid)
        else:
            children[ppid] = [pid]
    return ProcessTable(raw, children)


def snapshot(proc: str = PROC) -> dict[int, ProcStat]:
    """Every process that could be read, by PID."""
    table = process_table(proc)
    return {pid: stat for pid in table if (stat := table.stat(pid)) is not None}
