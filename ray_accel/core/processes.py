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

import bisect
import os
import resource
import weakref
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
        try:
            return os.read(fd, limit)
        finally:
            os.close(fd)
    except OSError:
        return None


# Decoded comms and states, by their bytes: a host's processes share a few
# names (every idle Ray worker is `ray::IDLE`) and a handful of states, and a
# decode costs more than a lookup. Bounded, as names are any bytes.
_COMMS: dict[bytes, str] = {}
_COMMS_MAX = 4096
_STATES = {bytes([c]): chr(c) for c in range(0x21, 0x7F)}


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
        values = (int(f[3]), int(f[4]), int(f[13]) + int(f[14]), int(f[21]), int(f[23]) * PAGE_SIZE)
    except ValueError:
        return None
    # tuple.__new__: the NamedTuple's own __new__ is a Python call, and a table parses hundreds.
    return tuple.__new__(ProcStat, (pid, comm_name(f[1]), state, *values))


def parent_of(raw: bytes) -> int | None:
    """The parent PID of a stat line, or None if it has none (it is malformed)."""
    try:
        return None if (f := split_stat(raw)) is None else int(f[3])
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
    """Every PID below `pid`, parents before children (breadth first)."""
    out = list(kids.get(pid, ()))
    for child in out:  # it sees what is appended as it goes
        if grandchildren := kids.get(child):
            out.extend(grandchildren)
    return out


class ProcessTable:
    """Every process of the host as last read: each one's stat line, and each
    parent's children. Finding a tree needs every process's parent, but the
    lines of the tree's processes only: `read(root)` reads again only what may
    have changed for `root`'s tree, and keeps the rest."""

    def __init__(self, proc: str = PROC) -> None:
        self.proc = proc
        self.lines: dict[int, bytes] = {}  # a line whose parent cannot be read is left out
        # `parse_stat` of each line the last `read` read (None: malformed past its parent).
        self.fields: dict[int, ProcStat | None] = {}
        self.children: dict[int, list[int]] = {}
        self._parents: dict[int, int] = {}
        self._inodes: dict[bytes, int] = {}  # of each /proc entry, by name, as last listed
        self._tree: set[int] = set()  # root's, as last read
        self._mark: bytes | None = None  # the end of `loadavg` at the last listing
        # The tree's stat files, kept open: a read of an open one costs about
        # half of an open, read and close, and it fails once its process is gone.
        self._fds: dict[int, int] = {}
        weakref.finalize(self, _close_all, self._fds)

    def read(self, root: int | None = None) -> ProcessTable:
        """List `/proc` if a process may have begun or ended since the last listing,
        and read the stat lines that may have changed since the last read (the first
        reads every one): a line read before is kept while it is the same process
        (procfs gives each process's directory a new inode), it was outside
        `root`'s tree, and its parent has not ended: a process gets another parent
        only when its own ends, and then a reaper among its ancestors (outside the
        tree too; a raylet may be one for its own tree) or its PID namespace's
        init, which is in the tree only for a namespace made inside it. Such a
        move is seen once the ended parent is reaped. Every process in `root`'s
        tree after the read was read by it; a line the same as the last read's is
        not parsed again. Children are kept in PID order, as a listing of `/proc`
        gives them."""
        prefix = os.fsencode(self.proc) + b"/"  # bytes: a str path is encoded again on every open
        # proc(5): loadavg ends with the host's task count and the last PID given out. While
        # neither moved, no process began, and none ended but as another began in a PID
        # namespace this one cannot see: a listing would show nothing new. (One of the tree
        # that ended fails its read; one outside it is left out at the next listing.)
        mark = read_small(f"{self.proc}/loadavg")
        mark = None if mark is None else mark.partition(b"/")[2]
        known, began, ended = self._inodes, list[int](), list[int]()
        listed = known if mark is not None and mark == self._mark else _listing(prefix)
        self._mark = mark if listed else None  # a listing that failed is tried again
        if listed != known:  # processes ended or began
            for name, inode in known.items() ^ listed.items():
                if name.isdigit():
                    (ended if known.get(name) == inode else began).append(int(name))
        todo = set(self._tree)
        for pid in [*ended, 0]:  # moved to another parent; 0: a parent outside this PID namespace
            todo.update(self.children.get(pid, ()))
        for pid in ended:
            self._forget(pid)
        todo.difference_update(ended)
        todo.update(began)  # a PID can have ended and begun: reused
        self._inodes, last, self.fields = listed, self.fields, {}
        while True:
            for pid in todo:
                self._read_line(prefix, pid, last)
            tree = set() if root is None else {root, *descendants(root, self.children)}
            # Kept lines in the tree now (moved there by a namespace's init, with their parent): read them too.
            if not (todo := (tree - self.fields.keys()) & self.lines.keys()):
                break
        self._tree = tree
        if len(tree) > resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 4:  # leave the process most of its share
            tree = set()
        for pid in self._fds.keys() - tree:
            os.close(self._fds.pop(pid))
        return self

    def _read_line(self, prefix: bytes, pid: int, last: Mapping[int, ProcStat | None]) -> None:
        """Read the process's line into the table (`last`: the fields of the last read)."""
        fds = self._fds
        try:
            if (fd := fds.get(pid)) is None:
                fd = fds[pid] = os.open(b"%s%d/stat" % (prefix, pid), os.O_RDONLY)
            line = os.pread(fd, 4096, 0)
        except OSError:
            line = b""  # ended since the listing
        if pid in last and self.lines.get(pid) == line:  # as it was: the same fields, the same parent
            self.fields[pid] = last[pid]
            return
        stat = parse_stat(pid, line)
        ppid = stat.ppid if stat is not None else parent_of(line)
        if ppid is None:  # gone, or malformed: it cannot be placed in a tree
            self._forget(pid)
            return
        self.lines[pid], self.fields[pid] = line, stat
        if (old := self._parents.get(pid)) != ppid:
            if old is not None:
                self._unlink(pid, old)
            self._parents[pid] = ppid
            bisect.insort(self.children.setdefault(ppid, []), pid)

    def _forget(self, pid: int) -> None:
        """Leave the process out: it ended, or its line cannot be read (read it again next time)."""
        self.lines.pop(pid, None)
        self.fields.pop(pid, None)
        self._inodes.pop(b"%d" % pid, None)
        if (fd := self._fds.pop(pid, None)) is not None:
            os.close(fd)
        if (ppid := self._parents.pop(pid, None)) is not None:
            self._unlink(pid, ppid)

    def _unlink(self, pid: int, ppid: int) -> None:
        kids = self.children[ppid]
        kids.remove(pid)
        if not kids:
            del self.children[ppid]

    def stat(self, pid: int) -> ProcStat | None:
        """`parse_stat` of the process's line as last read, or None if it is
        not in the table (or it is malformed)."""
        line = self.lines.get(pid)
        return None if line is None else parse_stat(pid, line)

    def __contains__(self, pid: int) -> bool:
        return pid in self.lines

    def __len__(self) -> int:
        return len(self.lines)


def _listing(prefix: bytes) -> dict[bytes, int]:
    """The inode of each entry of `/proc`, by name (names that are not PIDs never change)."""
    try:
        with os.scandir(prefix) as entries:
            return {e.name: e.inode() for e in entries}
    except OSError:
        return {}


def _close_all(fds: dict[int, int]) -> None:
    for fd in fds.values():
        os.close(fd)
    fds.clear()


def process_table(proc: str = PROC) -> ProcessTable:
    """Every process that could be read, each line read now."""
    return ProcessTable(proc).read()


def snapshot(proc: str = PROC) -> dict[int, ProcStat]:
    """Every process that could be read, by PID."""
    return {pid: stat for pid, line in process_table(proc).lines.items() if (stat := parse_stat(pid, line)) is not None}
