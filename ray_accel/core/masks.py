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
from collections.abc import Collection

from ray_accel.core.processes import ProcessRecord, ProcessTable

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


def _read_record(directory: str, pid: int, table: ProcessTable | None = None) -> str | None:
    """The mask in `pid`'s record if `pid` is still the process that wrote it
    (as `table` shows it, if given)."""
    try:
        fd = os.open(f"{directory}/{pid}", os.O_RDONLY)
    except OSError:
        return None
    try:
        mask, _, rest = os.read(fd, 4096).partition(b"\n")
        start = int(rest.partition(b"\n")[0])
        return mask.decode() if ProcessRecord(pid, start).alive(table) else None
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    finally:
        os.close(fd)


def published(pid: int) -> str | None:
    """The mask `pid` published, if `pid` is still the process that published it."""
    return _read_record(mask_dir(), pid)


def all_published(pids: Collection[int] | None = None, table: ProcessTable | None = None) -> dict[int, str]:
    """PID -> mask of every live process that published one (of `pids` only,
    if given). One listing of the directory, so a process that never
    published costs nothing: most processes of a tree hold no device.
    `table`: the process table the caller read already, to tell a live
    process from a dead one without reading its stat line again."""
    directory = mask_dir()
    try:
        names = os.listdir(directory)
    except OSError:
        return {}
    listed = [int(n) for n in names if n.isdigit()]
    out = {}
    for pid in listed if pids is None else set(listed).intersection(pids):
        mask = _read_record(directory, pid, table)
        if mask is not None:
            out[pid] = mask
    return out
