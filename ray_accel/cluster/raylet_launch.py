"""Run `ray start` in this process with the bridge installed, and report the
exact processes it started.

Usage (by the launcher): python -m ray_accel.cluster.raylet_launch RESULT_JSON -- start ARGS...
or, as a launch server: python -m ray_accel.cluster.raylet_launch --serve FD

A launch server imports Ray's `ray` command once (about a CPU-second, most
of what a launcher costs), then forks one launcher per request on the
socket FD (`launch_server.LaunchServer` is its other end): each request is the
launcher's arguments and environment, with its log's file descriptor
attached; the server answers with the child's PID and start time, and says
when each child exits. The server has one thread (a fork copies only the
calling thread), and a child leaves through this module's `main`, exactly as
a launcher started on its own does.

Detection runs in the process that starts a raylet, so this is where our
managers must be registered. Ray's `Node` keeps a handle on every process it
spawns; we record their PIDs, so `ray-accel stop` never matches by name. If
the start fails half-way, the processes started so far are killed here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import selectors
import signal
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ray_accel.core.files import open_for_write
from ray_accel.core.reader import LOCAL, dump
from ray_accel.rayapi import node as rayapi_node
from ray_accel.rayapi.feature import RayApiMissing

if TYPE_CHECKING:  # the record's module is imported only once Ray has started something
    from ray_accel.cluster.record import RayProcess


@dataclass(frozen=True, kw_only=True)
class LaunchReport:
    """The result file `launcher` reads: how the start went and what it
    started; the launcher adds which partition it was, and its log."""

    ok: bool
    error: str | None
    processes: tuple[RayProcess, ...] = ()
    node_id: str | None = None
    gcs_address: str | None = None
    node_ip: str | None = None
    dashboard_url: str | None = None  # the head's, when its dashboard runs
    name: str = field(default="", metadata=LOCAL)
    log: str | None = field(default=None, metadata=LOCAL)


def _pin() -> None:
    """Pin this process to the partition's CPUs before `ray start`: the
    raylet, its agents and its workers inherit the affinity."""
    from ray_accel.cluster.raylet import CPU_SET_ENV
    from ray_accel.core.numa import parse_cpulist

    if text := os.environ.get(CPU_SET_ENV):
        os.sched_setaffinity(0, parse_cpulist(text))


def _processes(node: Any) -> tuple[RayProcess, ...]:
    """Every process Ray's node started, with what identifies it later: its
    kernel start time and what its command line runs."""
    from ray_accel.cluster.procs import identity
    from ray_accel.cluster.record import RayProcess
    from ray_accel.core.processes import ProcessRecord, read_cmdline

    out = []
    for kind, pid in rayapi_node.node_processes(node):
        record = ProcessRecord.of(pid)
        argv = read_cmdline(pid)
        if record is not None and argv:
            out.append(RayProcess(kind, record.pid, record.start_ticks, identity(argv)))
    return tuple(out)


def _report(path: str, report: LaunchReport) -> int:
    # A new file, never through a link someone placed there (the state
    # directory may be shared): `start` removed any earlier result.
    fd = open_for_write(path, new=True)
    with os.fdopen(fd, "w") as f:
        json.dump(dump(report), f)
    return 0 if report.ok else 1


def _lead(path: str) -> None:
    """Write this launcher's PID and start time to `path` (see `raylet.leader_path`)."""
    from ray_accel.core.processes import ProcessRecord

    me = ProcessRecord.of(os.getpid())
    if me is not None:
        fd = open_for_write(path, new=True)
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": me.pid, "start_ticks": me.start_ticks}, f)


def main(argv: list[str]) -> int:
    from ray_accel.cluster.raylet import CPU_SET_ENV, PARTITION_ENV, leader_path, parse_launch_argv
    from ray_accel.core.errors import InputError

    try:
        result_path, ray_args = parse_launch_argv(argv)
    except InputError as e:
        print(e, file=sys.stderr)
        return 2
    _lead(leader_path(result_path))
    from ray_accel.bridge.managers import SPEC_ENV, BridgeUnsupported, install, specs_from_env

    specs = specs_from_env(os.environ.get(SPEC_ENV))
    if specs:  # none: `start` found the bridge unsupported and passes explicit resources and masks
        try:
            install(specs)
        except BridgeUnsupported as e:
            print(f"ray-accel: bridge not installed, explicit resources and masks only: {e}", file=sys.stderr)
    try:
        _pin()
    except (OSError, ValueError) as e:  # a CPU set this process may not use: report it, start nothing
        return _report(
            result_path, LaunchReport(ok=False, error=f"cannot pin to {CPU_SET_ENV}={os.environ.get(CPU_SET_ENV)}: {e}")
        )

    # Ray names a raylet's socket files raylet, raylet.1, ... by looking at the
    # disk, so raylets started at the same moment on one host pick the same
    # name and all but one die with "Address already in use". Name them by
    # partition and pid instead (the pid keeps a recovered raylet off the dead
    # one's file).
    tag = f"{os.environ.get(PARTITION_ENV, 'partition')}.{os.getpid()}"
    error: str | None = None
    captured: list[Any] = []
    try:
        with rayapi_node.capture_nodes(tag) as captured:
            rayapi_node.run_ray_cli(ray_args)
    except SystemExit as e:
        if e.code not in (0, None):
            error = f"ray start exited with {e.code}"
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    node = captured[0] if captured else None
    processes: tuple[RayProcess, ...] = ()
    facts = None
    if node is not None:
        try:
            processes = _processes(node)
            if error is None:
                facts = rayapi_node.node_facts(node)
        except RayApiMissing as e:  # started, but not recordable: undone (`start` kills the launch's group too)
            error = str(e)
        if error is not None:
            rayapi_node.kill_node(node)
    elif error is None:
        error = "ray start created no node"
    report = LaunchReport(ok=error is None, error=error, processes=processes)
    if facts is not None:
        url = facts.webui_url and (facts.webui_url if "://" in facts.webui_url else f"http://{facts.webui_url}")
        report = dataclasses.replace(
            report, node_id=facts.node_id, gcs_address=facts.gcs_address, node_ip=facts.node_ip, dashboard_url=url
        )
    return _report(result_path, report)


SERVE = "--serve"
MESSAGE_LIMIT = 1 << 20  # a request: the launcher's arguments and its whole environment


def _send(sock: socket.socket, message: Mapping[str, int | None]) -> None:
    try:
        sock.send(json.dumps(message).encode())
    except OSError:  # the asker is gone: nobody to tell (the next read sees the end)
        pass


def serve(sock: socket.socket) -> list[str] | None:
    """Fork a launcher for each request on `sock` until it closes; None in
    the server when it does, the launcher's arguments in a forked child (its
    session, output and environment already its own)."""
    from ray_accel.core.processes import ProcessRecord

    rayapi_node.load_ray_cli()
    # SIGCHLD wakes the loop through this pipe (no second thread to reap).
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fileobj is not sock:
                _drain(wake_r)
                continue
            data, fds, _, _ = socket.recv_fds(sock, MESSAGE_LIMIT, 1)
            if not data:  # the asker is done (or gone): its launchers live on alone
                return None
            request = json.loads(data)
            sys.stdout.flush()
            sys.stderr.flush()
            # The child closes its end once it leads a session of its own: the
            # answer waits for that, as `Popen(start_new_session=True)` returns only after it.
            ready_r, ready_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.setsid()
                os.close(ready_w)
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                selector.close()
                log, devnull = fds[0], os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.dup2(log, 1)
                os.dup2(log, 2)
                for fd in (devnull, log, wake_r, wake_w, ready_r):
                    os.close(fd)
                sock.close()
                os.environ.clear()
                os.environ.update(request["env"])
                return list(request["argv"])
            os.close(ready_w)
            os.read(ready_r, 1)
            os.close(ready_r)
            for fd in fds:
                os.close(fd)
            child = ProcessRecord.of(pid)  # not yet reaped: its start time is the child's
            _send(sock, {"pid": pid, "start_ticks": None if child is None else child.start_ticks})
        _reap(sock)


def _drain(fd: int) -> None:
    """Read a non-blocking pipe empty."""
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _reap(sock: socket.socket) -> None:
    """Reap every child that ended, saying how each did."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _serve_main(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(argv[0]))
    forked = serve(sock)
    if forked is None:
        return 0
    return main(forked)


if __name__ == "__main__":
    if sys.argv[1:2] == [SERVE]:
        sys.exit(_serve_main(sys.argv[2:]))
    sys.exit(main(sys.argv[1:]))
