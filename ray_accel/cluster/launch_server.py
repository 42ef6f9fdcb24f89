"""The asking end of a launch server (`raylet_launch.serve`): one process
that imports Ray's `ray` command once and forks a launcher for each raylet
of a start, in place of one interpreter per raylet that each imports it.

A launcher forked so is what `launcher.Launch` would have spawned: a session
and process group of its own, its output to its log, the launch's own
environment. What differs is who its parent is (the server, which says when
it exits), so `ForkedLauncher` answers `poll`, `wait` and `kill` as the
`subprocess.Popen` of a spawned launcher does. A launch is forked only when
its environment agrees with the server's on every variable Ray or Python
reads as it imports (`RAY_*`, `PYTHON*`): the server imported Ray under its
own. Anything the server cannot do (it did not start, it died, it did not
answer) leaves the launch to be spawned as before.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ray_accel.cluster import procs
from ray_accel.cluster.raylet_launch import MESSAGE_LIMIT, SERVE
from ray_accel.core.files import open_for_write
from ray_accel.core.processes import ProcessRecord

LOG_FILE = "launch-server.log"  # in the state directory, beside the launches' own logs
# Read as Ray and Python import: a launch whose values differ is spawned, never forked.
IMPORT_TIME_PREFIXES = ("RAY_", "PYTHON")
# The first answer waits for the server's imports (about a CPU-second, more on a loaded host).
ANSWER_TIMEOUT_S = 60.0


def import_time_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES)}


class LaunchServer:
    """A launch server started with `env`, its own output to `log_path`."""

    def __init__(self, env: Mapping[str, str], log_path: Path) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = procs.spawn(
                [sys.executable, "-m", "ray_accel.cluster.raylet_launch", SERVE, str(theirs.fileno())],
                env,
                open_for_write(log_path),
                pass_fds=(theirs.fileno(),),
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        self.env = import_time_env(env)
        self._asking = threading.Lock()  # one request at a time: the answers come in order
        self._changed = threading.Condition()
        self._answers: list[Mapping[str, int | None]] = []
        self._exited: dict[int, int] = {}
        self.gone = False
        threading.Thread(target=self._listen, daemon=True, name="launch-server").start()

    def forks(self, env: Mapping[str, str]) -> bool:
        """Whether a launch with `env` may be forked from this server."""
        return not self.gone and import_time_env(env) == self.env

    def fork(self, argv: Sequence[str], env: Mapping[str, str], log_fd: int) -> ForkedLauncher | None:
        """A launcher forked with `argv` and `env`, its output to `log_fd`
        (left open here); None if the server cannot (spawn it instead)."""
        request = json.dumps({"argv": list(argv), "env": dict(env)}).encode()
        with self._asking:
            try:
                socket.send_fds(self.sock, [request], [log_fd])
            except OSError:
                self.close()
                return None
            with self._changed:
                self._changed.wait_for(lambda: self._answers or self.gone, ANSWER_TIMEOUT_S)
                answer = self._answers.pop(0) if self._answers else None
        if answer is None:
            # No answer in time: stop the server (and so any fork it was still
            # going to make), and spawn this launch as before.
            self.close()
            return None
        pid, ticks = answer.get("pid"), answer.get("start_ticks")
        if not isinstance(pid, int) or not isinstance(ticks, int):
            return None
        return ForkedLauncher(self, ProcessRecord(pid, ticks))

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            return self._exited.get(pid)

    def wait_exit(self, pid: int, timeout_s: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exited or self.gone, timeout_s)
            return self._exited.get(pid)

    def close(self) -> None:
        """Tell the server to exit (the launchers it forked go on alone) and
        wait for it; SIGKILL it if it does not."""
        with self._changed:
            self.gone = True
            self._changed.notify_all()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.sock.close()

    def _listen(self) -> None:
        while True:
            try:
                data = self.sock.recv(MESSAGE_LIMIT)
                message = json.loads(data) if data else None
            except (OSError, ValueError):
                message = None
            with self._changed:
                if not isinstance(message, dict):
                    self.gone = True
                    self._changed.notify_all()
                    return
                if "exited" in message:
                    self._exited[int(message["exited"])] = int(message["code"])
                else:
                    self._answers.append({k: v for k, v in message.items() if isinstance(v, int) or v is None})
                self._changed.notify_all()


class ForkedLauncher:
    """A launcher the server forked, asked as a `subprocess.Popen` is."""

    def __init__(self, server: LaunchServer, record: ProcessRecord) -> None:
        self.server = server
        self.record = record
        self.pid = record.pid

    def poll(self) -> int | None:
        code = self.server.exit_code(self.pid)
        if code is not None:
            return code
        if self.server.gone and not self._running():
            return -1  # its parent is gone, so it was reaped elsewhere: how it exited is unknown
        return None

    def wait(self, timeout: float | None = None) -> int:
        code = self.server.wait_exit(self.pid, timeout)
        if code is None and self.server.gone:
            # Nobody will say when it exits: look again after a while.
            time.sleep(min(timeout, 0.1) if timeout is not None else 0.1)
        code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(f"launcher {self.pid}", timeout or 0.0)
        return code

    def kill(self) -> None:
        if self.poll() is None and self._running():
            procs.send(self.pid, signal.SIGKILL)

    def _running(self) -> bool:
        now = self.record.current()
        return now is not None and now.state not in ("Z", "X")
