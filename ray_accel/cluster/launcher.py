"""The launch subprocesses that start raylets, killable as a whole.

Each `ray start` runs in a launcher subprocess (`ray_accel.cluster.raylet_launch`)
that leads a session and process group of its own. Every process Ray starts
for it (GCS, raylet, dashboard, monitors) inherits that group (Ray 2.60's
`services.start_ray_process` neither calls `setsid` nor `setpgrp`; it blocks
SIGINT in them, so a Ctrl-C never reaches them) and stays in it after the
launcher exits. So on a timeout, a Ctrl-C or a failure elsewhere, the group's
members are found and killed even when the launcher died before it could say
what it started. Being in a session of their own also keeps the terminal's
Ctrl-C from killing launchers half-way: `start` decides what to stop.
"""

from __future__ import annotations

import concurrent.futures
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from ray_accel.cluster import procs
from ray_accel.cluster.launch_server import LOG_FILE, ForkedLauncher, LaunchServer
from ray_accel.cluster.raylet import launch_argv, leader_path
from ray_accel.cluster.raylet_launch import LaunchReport
from ray_accel.cluster.record import RayProcess, parse_processes
from ray_accel.core.errors import InputError
from ray_accel.core.files import open_for_write, read_bytes, tail_lines
from ray_accel.core.processes import ProcessRecord
from ray_accel.core.reader import Cursor, parse_json

RESULT_LIMIT = 1024 * 1024
POLL_S = 0.1


@dataclass(kw_only=True)
class Launch:
    """One `ray start` for partition `name` in a launcher of its own session."""

    name: str
    args: Sequence[str]
    env: Mapping[str, str]
    log_dir: Path
    timeout_s: float
    proc: subprocess.Popen[bytes] | ForkedLauncher | None = None
    leader: ProcessRecord | None = None
    result: LaunchReport | None = None

    @property
    def result_path(self) -> Path:
        return self.log_dir / f"{self.name}.result.json"

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    def begin(self, server: LaunchServer | None = None) -> None:
        """Start the launcher: forked by `server` where it can, else spawned."""
        argv = launch_argv(str(self.result_path), self.args)
        try:
            self.result_path.unlink(missing_ok=True)
            Path(leader_path(str(self.result_path))).unlink(missing_ok=True)
            log = open_for_write(self.log_path)
        except OSError as e:
            raise InputError(f"cannot write the launch files of {self.name} in {self.log_dir}: {e}") from None
        forked = None
        if server is not None and server.forks(self.env):
            try:
                forked = server.fork(argv, self.env, log)
            except BaseException:
                os.close(log)
                raise
        if forked is not None:
            os.close(log)  # the server passed its copy on to the launcher
            self.proc, self.leader = forked, forked.record
            return
        self.proc = procs.spawn([sys.executable, "-m", "ray_accel.cluster.raylet_launch", *argv], self.env, log)
        # Not yet waited for, so the PID cannot have been reused; unreadable
        # (never seen), its group is left alone rather than guessed at.
        self.leader = ProcessRecord.of(self.proc.pid)

    def wait(self, abort: threading.Event) -> LaunchReport:
        """The launcher's result, killing its whole group first if it runs
        past its time or `abort` is set."""
        assert self.proc is not None
        deadline = time.monotonic() + self.timeout_s
        why: str | None = None
        while why is None:
            try:
                self.proc.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                late = time.monotonic() > deadline
                why = "interrupted" if abort.is_set() else f"no result within {self.timeout_s:g}s" if late else None
        if why:
            self.kill()
        self.result = self._read_result(why)
        return self.result

    def kill(self) -> None:
        """SIGKILL the launcher, every member of its group, and what they
        started in a group of their own."""
        assert self.proc is not None
        procs.kill_tree(self.members())
        if self.proc.poll() is None:
            self.proc.kill()
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def members(self) -> list[ProcessRecord]:
        """What is left of this launcher's process group."""
        if self.leader is None:
            return []
        return procs.group_members(self.leader.pid, self.leader.start_ticks)

    def _read_result(self, why: str | None) -> LaunchReport:
        processes: tuple[RayProcess, ...] = ()
        said: list[str | None] = [None] * 4  # node_id, gcs_address, node_ip, dashboard_url
        try:
            raw = read_bytes(self.result_path, RESULT_LIMIT, follow=False)
            obj = Cursor(parse_json(raw, str(self.result_path)))
            processes = parse_processes(obj.at("processes", []).data, "processes")
            ok = obj.at("ok", None).data is True and why is None
            # What a launcher said, cut short; a null or empty string says nothing.
            said_error, *said = (
                Cursor(obj.mapping().get(k) or "", k).text(1 << 20, empty=True, forbid="")[:2000] or None
                for k in ("error", "node_id", "gcs_address", "node_ip", "dashboard_url")
            )
            error = why or said_error or (None if ok else "the launcher reported a failure")
            if ok and not all(said[:3]):
                ok, error = False, "the launcher's result names no node"
        except FileNotFoundError:
            ok, error = False, why or "the launcher exited without a result"
        except (OSError, InputError) as e:
            ok, error = False, why or f"unreadable launcher result {self.result_path}: {e}"
        if not ok:
            error = f"{error}; log {self.log_path}: " + " | ".join(tail_lines(self.log_path, 3))
        node_id, gcs_address, node_ip, dashboard_url = said
        return LaunchReport(
            ok=ok,
            error=error,
            processes=processes,
            node_id=node_id,
            gcs_address=gcs_address,
            node_ip=node_ip,
            dashboard_url=dashboard_url,
            name=self.name,
            log=str(self.log_path),
        )


@dataclass(kw_only=True)
class Launches:
    """Every launch of one `start` or `--recover`, so that all of them can be
    stopped, whatever state each is in. `forked`: the launchers are forked by
    one launch server (`launch_server`), started with the first launch, which
    imports Ray's command once for all of them: worth it where more than one
    raylet starts. `close` ends the server."""

    log_dir: Path
    timeout_s: float
    forked: bool = False
    abort: threading.Event = field(default_factory=threading.Event)
    launches: list[Launch] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: LaunchServer | None = None

    def run(self, name: str, args: Sequence[str], env: Mapping[str, str]) -> LaunchReport:
        launch = Launch(name=name, args=args, env=env, log_dir=self.log_dir, timeout_s=self.timeout_s)
        with self._lock:
            if self.abort.is_set():
                return LaunchReport(ok=False, error="interrupted", name=name)
            self.launches.append(launch)
            launch.begin(self._server_for(env))
        return launch.wait(self.abort)

    def check_files(self, names: Sequence[str]) -> None:
        """Refuse, naming it, a launch file of partitions `names` (its log,
        result or leader file) that is there but is not a regular file (a
        FIFO, a link, a folder): checked before the first launch, so that a
        bad one stops the start before anything runs, whichever partition's
        it is. Each launch opens its own files with the same refusal."""
        for name in names:
            launch = Launch(name=name, args=(), env={}, log_dir=self.log_dir, timeout_s=self.timeout_s)
            for path in (launch.log_path, launch.result_path, Path(leader_path(str(launch.result_path)))):
                try:
                    mode = path.lstat().st_mode
                except FileNotFoundError:
                    continue
                except OSError as e:
                    raise InputError(f"cannot read the launch file {path} of {name}: {e}") from None
                if not stat.S_ISREG(mode):
                    raise InputError(f"the launch file {path} of {name} is not a regular file")

    def _server_for(self, env: Mapping[str, str]) -> LaunchServer | None:
        if self.forked and self._server is None:
            self.forked = False  # one try: a server that cannot start leaves every launch spawned
            try:
                self._server = LaunchServer(env, self.log_dir / LOG_FILE)
            except OSError:
                return None
        return self._server

    def close(self) -> None:
        """End the launch server, if one runs (the launchers it forked go on)."""
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.close()

    def run_all(self, jobs: Sequence[tuple[str, Sequence[str], Mapping[str, str]]]) -> list[LaunchReport]:
        """Launch `jobs` at once; every result, in order. An interrupt here
        (Ctrl-C in the main thread) aborts every launch before it propagates."""
        if not jobs:
            return []
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="launch")
        try:
            futures = [pool.submit(self.run, *job) for job in jobs]
            pending = set(futures)
            while pending:
                _, pending = concurrent.futures.wait(pending, timeout=0.2)
            return [f.result() for f in futures]
        except BaseException:
            self.abort.set()
            raise
        finally:
            pool.shutdown(wait=True)

    def processes(self) -> list[RayProcess]:
        return [p for launch in self.launches if launch.result for p in launch.result.processes]

    def undo(self, grace_s: float = 2.0) -> list[int]:
        """Stop everything these launches started: abort those still running,
        then terminate every recorded process that is still ours and every
        member left in a launcher's group. Returns the PIDs signalled."""
        self.abort.set()
        with self._lock:
            launches = list(self.launches)
        for launch in launches:
            if launch.result is None and launch.proc is not None and launch.proc.poll() is None:
                launch.kill()
        protected = procs.never_signal()
        recorded = [p.record for p in self.processes() if procs.check(p, protected).ours]
        leftovers = [m for launch in launches for m in launch.members()]
        return procs.terminate([*recorded, *leftovers], grace_s)


def leftovers(log_dir: Path, name: str) -> list[ProcessRecord]:
    """What the last launch of partition `name` in `log_dir` left running,
    ours only: its launcher's group (its leader wrote itself down before it
    started anything) and the processes its result names. For a launch whose
    asker died before recording what it started."""
    result = log_dir / f"{name}.result.json"
    found: list[ProcessRecord] = []
    try:
        leader = Cursor(parse_json(read_bytes(Path(leader_path(str(result))), RESULT_LIMIT, follow=False), name))
        found += procs.group_members(leader.at("pid").int(1, 1 << 22), leader.at("start_ticks").int(0, (1 << 63) - 1))
    except (OSError, InputError):
        pass  # no leader file: that launch never started (or it is another version's)
    try:
        named = parse_processes(
            Cursor(parse_json(read_bytes(result, RESULT_LIMIT, follow=False), name)).at("processes", []).data,
            "processes",
        )
    except (OSError, InputError):
        named = ()
    protected = procs.never_signal()
    found += [p.record for p in named if procs.check(p, protected).ours]
    return list(dict.fromkeys(found))


def stop_leftovers(log_dir: Path, names: Sequence[str], grace_s: float = 2.0) -> list[int]:
    """Stop what the last launches of partitions `names` left running; the PIDs signalled."""
    return procs.terminate([r for name in names for r in leftovers(log_dir, name)], grace_s)
