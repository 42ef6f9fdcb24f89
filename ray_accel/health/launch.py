"""Starting the host's decider: from `start` once every partition is up, and
from `start --recover` where it is gone. Both run under the host's lock,
inside their undo: a decider that does not write its first `health.json` in
time is stopped and the command fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace

from ray_accel.cluster import procs, state
from ray_accel.cluster.files import open_for_write
from ray_accel.cluster.gcs import Progress
from ray_accel.cluster.procs import DECIDER_MODULE, identity
from ray_accel.cluster.record import DECIDER_KIND, HostRecord, RayProcess
from ray_accel.core.errors import RayAccelError
from ray_accel.core.health_state import HealthFileError, read_health
from ray_accel.core.processes import ProcessRecord
from ray_accel.plugins.inventory import SPEC_ENV

LOG_FILE = "decider.log"
FIRST_POLL_S = 90.0


def decider_argv(record: HostRecord, place: state.Place) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        DECIDER_MODULE,
        "--state-dir",
        str(place.directory),
        "--created",
        repr(record.created),
    ]
    return [*argv, "--explicit"] if place.explicit else argv


def start_decider(record: HostRecord, progress: Progress) -> HostRecord:
    """Start the decider for `record` (saved with it), and wait for its first poll."""
    settings = record.health
    if settings is None:
        return record
    place = state.place_of(record)
    log = state.ensure_dir(place) / LOG_FILE
    try:
        fd = open_for_write(log)
    except OSError as e:
        raise RayAccelError(f"cannot write the decider's log {log}: {e}") from None
    started = time.time()
    argv = decider_argv(record, place)
    # Its backend is the one the raylets' spec names (`process_backend`).
    proc = procs.spawn(argv, {**os.environ, SPEC_ENV: record.spec.to_env()}, fd)
    # Not yet waited for, so its PID is not reused; its identity is what it
    # was started with (its command line may read empty for a moment after exec).
    found = ProcessRecord.of(proc.pid)
    if found is None:
        proc.kill()
        raise RayAccelError(f"the health decider exited at once; see {log}")
    decider = RayProcess(DECIDER_KIND, proc.pid, found.start_ticks, identity(argv))
    record = replace(record, decider=decider)
    state.save(record)
    progress(f"health decider {proc.pid}: --on-unhealthy {settings.action.value}, log {log}")
    try:
        _wait_first_poll(place, started, proc, log)
    except BaseException:
        procs.terminate([decider.record], 5.0)
        raise
    return record


def _wait_first_poll(place: state.Place, started: float, proc: subprocess.Popen[bytes], log: object) -> None:
    deadline = time.monotonic() + FIRST_POLL_S
    while time.monotonic() < deadline:
        try:
            health = read_health(place.directory)
        except HealthFileError:
            health = None
        if health is not None and health.at >= started and health.polls >= 1:
            return
        if proc.poll() is not None:
            raise RayAccelError(f"the health decider exited ({proc.returncode}) before its first poll; see {log}")
        time.sleep(0.2)
    raise RayAccelError(f"the health decider made no poll within {FIRST_POLL_S:g}s; see {log}")


def ensure_decider(record: HostRecord, progress: Progress) -> HostRecord:
    """`start --recover`: start the decider again where it is gone."""
    if record.health is None:
        return record
    if record.decider is not None and procs.check(record.decider).ours:
        return record
    return start_decider(replace(record, decider=None), progress)
