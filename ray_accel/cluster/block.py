"""`ray-accel start --block`: stay in the foreground with the partitions, as
`ray start --block` does for one raylet, so a supervisor (systemd, a KubeRay
pod, a Slurm step) can own them.

While blocking, this process holds no lock and only watches: each partition's
raylet through /proc, its registration through the GCS. It prints every
change, and ends:
- on SIGTERM, SIGINT or SIGHUP: it stops every partition (`ray-accel stop`'s
  own code, under the lock) and exits 0;
- when `ray-accel stop` from elsewhere stops them (the record says `stopping`,
  then is gone): it exits 0;
- when a partition dies: it stops the others and exits 1, so the supervisor
  sees the failure and can start the whole host again.

The record is read again every round: a helper of the host (the health decider) restarts a
partition (a new raylet, recorded) or stops one on purpose (marked in the
record), and neither is a partition dying.
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType

from ray_accel.cluster import auth, procs, statedir
from ray_accel.cluster.record import HostRecord
from ray_accel.cluster.signals import handled
from ray_accel.cluster.stop import stop
from ray_accel.core.errors import RayAccelError
from ray_accel.rayapi.gcs import Progress, poll_nodes

POLL_S = 0.5
GCS_EVERY_S = 10.0
STOP_WAIT_S = 120.0


def _on_disk(record: HostRecord, keep: bool = True) -> HostRecord | None:
    """The record as it is now on disk (a helper may have restarted a
    partition), None once it is gone or another start's; while it cannot be
    read, `record` as it was if `keep` (what we started is still what we
    watch), else None."""
    try:
        current = statedir.load(statedir.place_of(record))
    except RayAccelError:
        return record if keep else None
    return current if current is not None and current.created == record.created else None


def _stop_all(record: HostRecord, grace_s: float, progress: Progress) -> None:
    """Stop the partitions with `stop`'s own code, waiting while another
    command (a `ray-accel stop` already at work) holds the lock."""
    deadline = time.monotonic() + STOP_WAIT_S
    while True:
        if _on_disk(record) is None:
            return  # someone else stopped them (and perhaps started anew)
        try:
            result = stop(grace_s, statedir.place_of(record))
            progress(result.message)
            return
        except statedir.LockError:
            if time.monotonic() > deadline:
                raise
            time.sleep(POLL_S)


def _wait_stopped(record: HostRecord) -> None:
    """A `ray-accel stop` is at work: wait until the record is gone."""
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline and _on_disk(record, keep=False) is not None:
        time.sleep(POLL_S)


def supervise(record: HostRecord, progress: Progress, grace_s: float = 5.0) -> int:
    """Block until asked to stop or a partition dies; see the module doc."""
    wake = threading.Event()
    asked: list[str] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        asked.append(signal.Signals(signum).name)
        wake.set()

    with handled((signal.SIGTERM, signal.SIGINT, signal.SIGHUP), handler):
        return _watch(record, progress, grace_s, wake, asked)


def _watch(record: HostRecord, progress: Progress, grace_s: float, wake: threading.Event, asked: list[str]) -> int:
    names = ", ".join(p.name for p in record.raylets())
    progress(f"blocking with {names}: SIGTERM, Ctrl-C or `ray-accel stop` stops them")
    alive: dict[str, bool] = {}
    registered: dict[str, bool | None] = {}
    gcs_error: str | None = None
    next_gcs = 0.0
    auth.apply(record.auth)  # the GCS is asked with the record's auth, once set for every poll
    while True:
        if asked:
            progress(f"{asked[0]}: stopping every partition")
            _stop_all(record, grace_s, progress)
            return 0
        current = _on_disk(record)
        if current is None or current.stopping:
            progress("`ray-accel stop` is stopping the partitions")
            _wait_stopped(record)
            progress("stopped by `ray-accel stop`")
            return 0
        checks = procs.check_record(current)
        if current.change is not None:
            # A host change stops and starts partitions on purpose: watched again once it ends.
            alive.clear()
            wake.wait(POLL_S)
            continue
        for p in current.raylets():
            if p.held:
                # Drained, stopped or being restarted by the health decider, on purpose.
                if alive.pop(p.name, None) is not None:
                    progress(f"{p.name}: {p.health.state.value} by the health decider")
                continue
            # A partition lives while its raylet does (and, on the head, the GCS).
            vital = p.of_kind("raylet", "gcs_server")
            gone = [r for r in vital if not checks[r].ours]
            now = bool(vital) and not gone
            if alive.get(p.name) != now:
                if p.name in alive or not now:
                    what = ", ".join(f"{r.kind} {r.pid}" for r in (gone or vital))
                    progress(f"{p.name}: {what} {'alive' if now else 'DIED'}")
                alive[p.name] = now
        if time.monotonic() >= next_gcs:
            next_gcs = time.monotonic() + GCS_EVERY_S
            # An error is said once per change; asked again next round.
            nodes, gcs_error = poll_nodes(record.gcs_address, gcs_error, progress, 3.0)
            for p in current.raylets():
                reg = None if nodes is None else p.node_id in nodes and nodes[p.node_id].alive
                if registered.get(p.name, True) != reg:
                    progress(f"{p.name}: {'registered' if reg else 'NOT registered' if reg is False else 'GCS silent'}")
                registered[p.name] = reg
        dead = [name for name, ok in alive.items() if not ok]
        if dead:
            if (latest := _on_disk(record)) is None or latest.stopping:
                continue  # a stop is at work: the next round says so
            progress(f"partition {dead[0]} died: stopping every partition")
            _stop_all(record, grace_s, progress)
            return 1
        wake.wait(POLL_S)
