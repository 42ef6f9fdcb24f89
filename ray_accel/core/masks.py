"""Each worker's current device mask, published where samplers on the node can read it.

``/proc/<pid>/environ`` shows a process's environment as it was at exec, and
Ray sets the mask in-process before each task, so tools outside the process
would see only the raylet's whole mask. The bridge writes a worker's mask
here whenever Ray sets it; backends read it back to attribute devices to
processes. The record carries the process's start time, so a reused PID never
inherits a dead worker's mask.
"""

from __future__ import annotations

import functools
import logging
import os
import tempfile

from ray_accel.core.processes import ProcessRecord

log = logging.getLogger(__name__)

MASK_DIR_ENV = "RAYACCEL_MASK_DIR"


def mask_dir() -> str:
    return os.environ.get(MASK_DIR_ENV) or os.path.join(tempfile.gettempdir(), "ray-accel-masks")


@functools.cache
def _home(directory: str) -> tuple[str, int]:
    """Make the directory and read this process's start time once: publishing
    runs at every task start."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    me = ProcessRecord.of()
    return directory, me.start_ticks if me is not None else -1


def publish(mask: str) -> None:
    """Record this process's current mask. Never raises: a metrics aid must not
    break a task's start."""
    try:
        directory, start = _home(mask_dir())
        tmp = os.path.join(directory, f".{os.getpid()}.tmp")
        with open(tmp, "w") as f:
            f.write(f"{mask}\n{start}\n")
        os.replace(tmp, os.path.join(directory, str(os.getpid())))
    except Exception as e:
        log.debug("could not publish mask: %s", e)


def published(pid: int) -> str | None:
    """The mask `pid` published, if `pid` is still the process that published it."""
    try:
        with open(os.path.join(mask_dir(), str(pid))) as f:
            mask, start = f.read(4096).split("\n")[:2]
        if not ProcessRecord(pid, int(start)).alive():
            return None
        return mask
    except (OSError, ValueError):
        return None
