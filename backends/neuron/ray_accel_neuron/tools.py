"""Finding and running the Neuron tools (`neuron-ls`, `neuron-monitor`).

A tool runs in its own session, so it and every child it starts form one
process group; on a timeout the whole group is killed (killing only the
tool would leave its children running). Output goes to unlinked temporary
files rather than pipes: a child that outlives the tool cannot keep us
waiting on an open pipe, and what is read back is bounded.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from ray_accel.core.errors import RayAccelError

NEURON_BIN = "/opt/aws/neuron/bin"
MAX_OUTPUT_BYTES = 16 * 1024 * 1024


class ToolError(RayAccelError):
    """A tool could not be run or did not answer; the message is the reason."""


@dataclass(frozen=True)
class ToolRun:
    returncode: int
    stdout: str
    stderr: str

    def last_error_line(self) -> str:
        lines = [ln.strip() for ln in (self.stderr or self.stdout).splitlines() if ln.strip()]
        return lines[-1] if lines else "no output"


def find_tool(name: str, explicit: str | None) -> str | None:
    """The user's path if given, else the Neuron package's bin directory, else PATH."""
    if explicit:
        return explicit
    default = os.path.join(NEURON_BIN, name)
    if os.path.isfile(default) and os.access(default, os.X_OK):
        return default
    return shutil.which(name)


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_back(f: IO[bytes], what: str) -> str:
    f.seek(0, os.SEEK_END)
    size = f.tell()
    if size > MAX_OUTPUT_BYTES:
        raise ToolError(f"{what} printed {size} bytes, more than {MAX_OUTPUT_BYTES}")
    f.seek(0)
    return f.read().decode("utf-8", "replace")


def run_tool(argv: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None) -> ToolRun:
    """Run `argv` to completion within `timeout_s`, in its own process group."""
    shown = " ".join(argv)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=None if env is None else dict(env),
                start_new_session=True,
            )
        except OSError as e:
            raise ToolError(f"cannot run {argv[0]}: {e.strerror or e}") from None
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            # The group id is the tool's pid, still reserved while it is unreaped.
            kill_group(proc.pid)
            proc.wait()
            raise ToolError(f"{shown} did not answer within {timeout_s:g}s (its process group was killed)") from None
        return ToolRun(proc.returncode, _read_back(out, shown), _read_back(err, shown))
