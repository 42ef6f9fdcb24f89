"""Starting the host's decider: from `start` once every partition is up, and
from `start --recover` where it is gone. Both run under the host's lock,
inside their undo: a decider that does not write its first `health.json` in
time is stopped and the command fails.
"""

from __future__ import annotations

import subprocess
import time
from contextlib import suppress
from dataclasses import replace

from ray_accel.cluster import helpers, procs
from ray_accel.cluster import statedir as state
from ray_accel.cluster.record import DECIDER_KIND, HostRecord
from ray_accel.core.errors import RayAccelError
from ray_accel.core.health_state import HealthFileError, read_health
from ray_accel.rayapi.gcs import Progress

LOG_FILE = "decider.log"
FIRST_POLL_S = 90.0
WHAT = "the health decider"


def start_decider(record: HostRecord, progress: Progress) -> HostRecord:
    """Start the decider for `record` (saved with it), and wait for its first poll."""
    settings = record.health
    if settings is None:
        return record
    place = state.place_of(record)
    log = state.ensure_dir(place) / LOG_FILE
    started = time.time()
    inputs = helpers.HelperInputs(str(place.directory), record.created, place.explicit)
    # Its backend is the one the raylets' spec names (`process_backend`).
    decider, proc = helpers.spawn(DECIDER_KIND, WHAT, inputs, log, record.spec.to_env())
    record = state.save(replace(record, decider=decider))
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
        with suppress(HealthFileError):  # unreadable: not its first poll yet
            health = read_health(place.directory)
            if health is not None and health.at >= started and health.polls >= 1:
                return
        if proc.poll() is not None:
            raise RayAccelError(f"{WHAT} exited ({proc.returncode}) before its first poll; see {log}")
        time.sleep(0.2)
    raise RayAccelError(f"{WHAT} made no poll within {FIRST_POLL_S:g}s; see {log}")


def ensure_decider(record: HostRecord, progress: Progress) -> HostRecord:
    """`start --recover`: start the decider again where it is gone."""
    if record.health is None:
        return record
    if record.decider is not None and procs.check(record.decider).ours:
        return record
    return start_decider(replace(record, decider=None), progress)
