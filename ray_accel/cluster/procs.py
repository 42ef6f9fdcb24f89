"""Deciding which recorded processes are ours, and stopping exactly those.

A PID from the state record names "our" process only when all of these hold:
the kernel start time is the one recorded (PIDs are reused), the process runs
what was recorded when it started (its identity: the executable, or the
script or module a Python interpreter runs), that identity is the Ray process
of the recorded kind (a raylet runs Ray's ``raylet`` binary, a dashboard
Ray's ``dashboard.py``), and it belongs to this user. PID 1, this process and
its ancestors are never ours, whatever the record says.

A process that is simply gone (no such PID, another start time, a zombie) is
*gone*: the record is stale. A live process that the record misnames is
*foreign*: the record cannot be trusted, and nothing is signalled.
"""

from __future__ import annotations

import enum
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib.util import find_spec

from ray_accel.cluster.record import DECIDER_KIND, REPARTITION_KIND, HostRecord, RayProcess, RecordError
from ray_accel.core.processes import (
    ProcessRecord,
    children_map,
    current,
    descendants,
    owner,
    read_cmdline,
    read_stat,
    snapshot,
)

_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?[a-z]?$")
# Interpreter options that take a value as the next argument (python(1)).
_PYTHON_VALUE_OPTIONS = {"-W", "-X", "-Q"}

# What each kind of process Ray 2.60 starts for a raylet runs (Node.all_processes
# keys, ray/_private/ray_constants.py PROCESS_TYPE_*; the paths are those of
# ray/_private/services.py start_* functions), as a suffix of its identity.
RAY_PROCESSES = {
    "raylet": ("/ray/core/src/ray/raylet/raylet",),
    "gcs_server": ("/ray/core/src/ray/gcs/gcs_server",),
    "monitor": ("/ray/autoscaler/_private/monitor.py",),
    "log_monitor": ("/ray/_private/log_monitor.py",),
    "dashboard": ("/ray/dashboard/dashboard.py",),
    "ray_client_server": ("-m ray.util.client.server",),
    "reporter": ("/ray/dashboard/agent.py",),
    "dashboard_agent": ("/ray/dashboard/agent.py",),
    "runtime_env_agent": ("/ray/_private/runtime_env/agent/main.py",),
}
# ray-accel's own long-lived helper processes, by kind: what each runs
# (`-m MODULE`). One explicit table, so that `stop` and `status` know every
# helper with nothing but their own imports; a kind not in it is refused
# (`helpers.identity_of`).
OWN_PROCESSES: Mapping[str, tuple[str, ...]] = {
    DECIDER_KIND: ("-m ray_accel.health.decider",),
    REPARTITION_KIND: ("-m ray_accel.hostops.repartition",),
}


class Verdict(enum.Enum):
    OURS = "ours"
    GONE = "gone"
    FOREIGN = "foreign"


@dataclass(frozen=True)
class Check:
    process: RayProcess
    verdict: Verdict
    reason: str  # why it is gone or foreign; "" when ours

    @property
    def ours(self) -> bool:
        return self.verdict is Verdict.OURS

    def describe(self) -> str:
        p = self.process
        return f"process {p.pid} ({p.kind}): {self.reason}"


def identity(argv: Sequence[str]) -> str:
    """What a command line runs: argv[0], or for a Python interpreter the
    script it runs or ``-m module``."""
    if not argv:
        return ""
    if not _PYTHON.match(os.path.basename(argv[0])):
        return argv[0]
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            return f"-m {argv[i + 1]}" if i + 1 < len(argv) else argv[0]
        if arg.startswith("-m") and len(arg) > 2:
            return f"-m {arg[2:]}"
        if arg == "-c" or not arg.startswith("-"):
            return arg
        i += 2 if arg in _PYTHON_VALUE_OPTIONS else 1
    return argv[0]


def _ray_dir() -> str | None:
    spec = find_spec("ray")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.realpath(next(iter(spec.submodule_search_locations)))


def is_ray_process(kind: str, ident: str) -> bool:
    """Whether `ident` is what Ray runs: what the table says for `kind`, or
    (a kind or path another Ray version has) a file of the installed Ray
    package or one of its modules; for one of ray-accel's own helpers,
    exactly its module."""
    if kind in OWN_PROCESSES:
        return ident in OWN_PROCESSES[kind]
    known = RAY_PROCESSES.get(kind, ())
    if any(ident == s if s.startswith("-m ") else ident.endswith(s) for s in known):
        return True
    if ident.startswith("-m "):
        return ident.startswith("-m ray.")
    ray_dir = _ray_dir()
    return ray_dir is not None and ident.startswith("/") and os.path.realpath(ident).startswith(ray_dir + os.sep)


def never_signal() -> set[int]:
    """PID 1, this process and every process above it."""
    out, pid = {1}, os.getpid()
    while pid > 0 and pid not in out:
        out.add(pid)
        stat = read_stat(pid)
        pid = stat.ppid if stat is not None else 0
    return out


def check(proc: RayProcess, protected: set[int] | None = None) -> Check:
    """Whether the recorded `proc` is alive and ours, gone, or foreign."""
    protected = never_signal() if protected is None else protected
    if proc.pid in protected:
        who = "PID 1 (init)" if proc.pid == 1 else "this ray-accel process or one of its parents"
        return Check(proc, Verdict.FOREIGN, f"{who} is never a process ray-accel started")
    stat = current(proc.pid, proc.start_ticks)
    if stat is None:
        # Gone by the one liveness rule; the stat line again only to say how.
        now = read_stat(proc.pid)
        reused = now is not None and now.start_ticks != proc.start_ticks
        return Check(proc, Verdict.GONE, "exited (its PID now names a younger process)" if reused else "exited")
    argv = read_cmdline(proc.pid)
    if argv is None:
        return Check(proc, Verdict.GONE, "exited")
    if not is_ray_process(proc.kind, proc.identity):
        whose = "ray-accel's" if proc.kind in OWN_PROCESSES else "Ray's"
        return Check(
            proc, Verdict.FOREIGN, f"the record says it runs {proc.identity!r}, which is not {whose} {proc.kind}"
        )
    if identity(argv) != proc.identity:
        shown = " ".join(argv)[:200] or f"[{stat.name}]"
        return Check(proc, Verdict.FOREIGN, f"its command line is {shown!r}, not the recorded {proc.identity!r}")
    uid = owner(proc.pid)
    if uid is not None and uid != os.geteuid():
        return Check(proc, Verdict.FOREIGN, f"it belongs to user {uid}, not to this user ({os.geteuid()})")
    return Check(proc, Verdict.OURS, "")


def check_record(record: HostRecord) -> dict[RayProcess, Check]:
    protected = never_signal()
    return {p: check(p, protected) for p in record.processes()}


def require_trusted(record: HostRecord, source: str, action: str) -> dict[RayProcess, Check]:
    """The checks of every recorded process, or `RecordError` (nothing
    signalled) when the record names a live process that is not ours."""
    checks = check_record(record)
    foreign = [c for c in checks.values() if c.verdict is Verdict.FOREIGN]
    if foreign:
        raise RecordError(
            f"state file {source} names {foreign[0].describe()}; {action} signals nothing. "
            f"If no ray-accel partitions run on this host, remove {source}"
        )
    return checks


def send(pid: int, sig: int) -> bool:
    """Whether `sig` reached `pid`."""
    try:
        os.kill(pid, sig)
        return True
    except OSError:
        return False


# Readings of /proc that `_hold` makes at most while it stops a tree: each
# round stops what the last one found, so a tree settles in as many rounds as
# it is deep (a launcher, Ray's node, a raylet, its agents: four).
HOLD_ROUNDS = 20


def _hold(records: Iterable[ProcessRecord]) -> list[ProcessRecord]:
    """Stop (SIGSTOP) the given processes that are still those processes and
    every descendant of theirs, reading /proc again until no new descendant
    appears; the processes stopped, parents first. A stopped process starts
    nothing, so none is born after the last reading and outlives the signal
    its parent is about to get (a raylet stopped as it starts its agents,
    which would go on under PID 1). PID 1, this process and its ancestors
    are never stopped."""
    never = never_signal()
    held: dict[int, ProcessRecord] = {}
    roots = list(records)
    for _ in range(HOLD_ROUNDS):
        new = [r for r in tree([*roots, *held.values()]) if r.pid not in held and r.pid not in never]
        if not new:
            break
        for r in new:
            if send(r.pid, signal.SIGSTOP):
                held[r.pid] = r
    return list(held.values())


def terminate(records: Iterable[ProcessRecord], grace_s: float = 5.0) -> list[int]:
    """SIGTERM the given processes that are still those processes, and their
    descendants; SIGKILL what is left after `grace_s`. Returns the PIDs
    signalled. The whole tree is stopped first (`_hold`), then each member
    gets SIGTERM and SIGCONT, so each handles the SIGTERM as it resumes and
    none was started unseen. The caller has checked that the records are
    ours; PID 1, this process and its ancestors are skipped whatever it says."""
    targets = {r.pid: r for r in _hold(records)}
    signalled = [pid for pid, r in targets.items() if r.alive() and send(pid, signal.SIGTERM)]
    for pid in targets:
        send(pid, signal.SIGCONT)
    _wait_gone([targets[p] for p in signalled], grace_s)
    left = [p for p in signalled if targets[p].alive()]
    for pid in left:
        send(pid, signal.SIGKILL)
    _wait_gone([targets[p] for p in left], 5)
    return sorted(signalled)


def kill_tree(records: Iterable[ProcessRecord]) -> list[int]:
    """SIGKILL the given processes that are still those processes and every
    descendant of theirs, the whole tree stopped first (`_hold`). Returns the
    PIDs killed."""
    held = _hold(records)
    killed = [r.pid for r in held if r.alive() and send(r.pid, signal.SIGKILL)]
    _wait_gone(held, 5)
    return sorted(killed)


def tree(records: Iterable[ProcessRecord]) -> list[ProcessRecord]:
    """The given processes that are still those processes, and every
    descendant of theirs, parents first. One reading of /proc, made before
    anything is signalled: a process whose parent was killed is no longer
    below it (Ray's agents, for one, outlive their raylet for a moment)."""
    live = [r for r in records if r.alive()]
    if not live:
        return []
    kids = children_map(snapshot().values())
    found: dict[int, ProcessRecord] = {}
    for r in live:
        found.setdefault(r.pid, r)
        for pid in descendants(r.pid, kids):
            child = ProcessRecord.of(pid)
            if child is not None:
                found.setdefault(pid, child)
    return list(found.values())


def _wait_gone(records: Sequence[ProcessRecord], seconds: float) -> None:
    deadline = time.monotonic() + max(0.0, seconds)
    while time.monotonic() < deadline and any(r.alive() for r in records):
        time.sleep(0.05)


def group_members(pgid: int, not_before_ticks: int) -> list[ProcessRecord]:
    """Live processes of process group `pgid` that started no earlier than
    `not_before_ticks` (the group leader's start: an older process cannot
    have been started by it)."""
    never = never_signal()
    return [
        ProcessRecord(s.pid, s.start_ticks)
        for s in snapshot().values()
        if s.pgrp == pgid and s.start_ticks >= not_before_ticks and s.pid not in never and s.state not in ("Z", "X")
    ]


def spawn(
    argv: Sequence[str], env: Mapping[str, str], log_fd: int, pass_fds: Sequence[int] = ()
) -> subprocess.Popen[bytes]:
    """Start a process we own in a session of its own (a Ctrl-C in the
    caller's terminal never reaches it), its output to `log_fd`, which is
    closed here whether or not the start succeeds (`pass_fds`: descriptors
    it inherits, left open here)."""
    try:
        return subprocess.Popen(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )
    finally:
        os.close(log_fd)
