"""Each worker's current device mask, published where samplers on the host can read it.

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
import time
from pathlib import Path

from ray_accel.core.files import write_atomic
from ray_accel.core.processes import ProcessRecord, read_small

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
        write_atomic(Path(directory) / str(os.getpid()), f"{mask}\n{start}\n")
    except Exception as e:
        log.debug("could not publish mask: %s", e)


def parse_record(raw: bytes) -> tuple[str, int] | None:
    """A record as `publish` writes it (the mask, then the writer's kernel
    start time, one a line) as (mask, start ticks), or None if malformed."""
    mask, _, rest = raw.partition(b"\n")
    start, newline, _ = rest.partition(b"\n")
    if not newline or not start.isascii() or not start.isdigit():
        return None
    try:
        return mask.decode(), int(start)
    except ValueError:  # UnicodeDecodeError is a ValueError
        return None


def read_records(directory: str) -> dict[int, tuple[str, int]]:
    """PID -> (mask, start ticks) of every well-formed record in `directory`,
    live writer or not."""
    try:
        names = os.listdir(directory)
    except OSError:
        return {}
    raw = {int(name): read_small(f"{directory}/{name}") for name in names if name.isdigit()}
    records = {pid: parse_record(r) for pid, r in raw.items() if r is not None}
    return {pid: r for pid, r in records.items() if r is not None}


# Kernel file timestamps come from a clock that advances once per tick (at
# most 10 ms: HZ is 100 or more); a directory whose last change is older than
# this cannot change again without its timestamp changing.
SETTLED_NS = 100_000_000
# A file system that stamps whole seconds (FAT: 2 s) needs longer.
SETTLED_COARSE_NS = 3_000_000_000


class PublishedMasks:
    """`read_records` for a caller that asks again and again (a metrics
    exporter, once per sample): the records are read again only when the
    directory changed. `publish` replaces a record by renaming a new file over
    it, which changes the directory's mtime and ctime; a record written in
    place by something else is seen at the next change of the directory.
    The records say nothing of liveness: the caller checks their writers on
    every use (the mock's telemetry), so a process that ended
    or a reused PID is never attributed a mask."""

    def __init__(self) -> None:
        self._key: tuple[str, int, int, int, int] | None = None
        self._records: dict[int, tuple[str, int]] = {}

    def records(self) -> dict[int, tuple[str, int]]:
        """PID -> (mask, start ticks) of every record, live writer or not (read only)."""
        directory = mask_dir()
        try:
            # Before the listing: a change during the reading then shows as a new key.
            st = os.stat(directory)
        except OSError:
            self._key, self._records = None, {}
            return self._records
        key = (directory, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
        if key == self._key:
            return self._records
        self._records = read_records(directory)
        # A change within the same timestamp tick as the last one would keep
        # the key: trust the key only once the directory has settled.
        settled = SETTLED_COARSE_NS if st.st_mtime_ns % 1_000_000_000 == 0 else SETTLED_NS
        self._key = key if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) >= settled else None
        return self._records
