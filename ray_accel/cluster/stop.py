"""`ray-accel stop`: stop exactly the processes `start` started, by PID.

Under the host's lock. The record is checked first: if it names a live
process that is not the one recorded (PID 1, this process, another program
that now has the PID and start time), nothing at all is signalled and the
command exits 2 naming the record.

The host's helper processes (`ray_accel.cluster.helpers`) go first, before
the lock is taken: one may hold the lock while it restarts a partition, and
on SIGTERM it undoes a restart half done (stopping what it launched, saving
the record as it stands) and releases the lock; then the record names
everything that runs.
"""

from __future__ import annotations

import logging
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path

from ray_accel.cluster import helpers, launcher, procs, statedir
from ray_accel.cluster.raylet import flag_value
from ray_accel.cluster.record import HostRecord
from ray_accel.core.files import read_bytes
from ray_accel.rayapi import address as rayapi_address
from ray_accel.rayapi.feature import RayApiMissing

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stopped:
    """What `stop` stopped; the fields are its JSON keys."""

    stopped: tuple[str, ...]
    pids: tuple[int, ...]
    message: str


def stop(grace_s: float = 5.0, place: statedir.Place | None = None) -> Stopped:
    """Stop what this host's record names (`place`: that record, as a `start
    --block` knows it; default: the one `statedir.locate` finds)."""
    if place is None:
        found = statedir.locate()
        if found.place is None:
            return _nothing(found.note())
        place = found.place
    helper_pids = _stop_helpers_first(place, max(grace_s, HELPER_GRACE_S))
    with statedir.host_lock("stop", place):
        record = statedir.load(place)
        if record is None:
            return _nothing(None)
        for warning in statedir.check_host(record, place, "stop"):
            statedir.warn(warning)
        checks = procs.require_trusted(record, str(place.file), "stop")
        # Tell a `start --block` watching these partitions that this is asked for.
        statedir.save(replace(record, stopping=True))
        # The partitions' raylets together (each waits on its own exit, so one
        # grace period serves them all), the head (GCS) last, so no raylet
        # sees its GCS vanish.
        ordered = record.raylets()
        own = [p for p in ordered if not p.head]
        last = [p for p in ordered if p.head]
        signalled: list[int] = []
        for group in (own, last):
            signalled += procs.terminate([r.record for p in group for r in p.processes if checks[r].ours], grace_s)
        if record.change is not None:  # what a change's launches left that the record does not name yet
            signalled += launcher.stop_leftovers(place.directory, [t.name for t in record.change.target], grace_s)
        if record.head:
            forget_cluster_address(record)
        statedir.clear(place)
    stopped = tuple(p.name for p in ordered)
    pids = tuple(sorted({*signalled, *helper_pids}))
    return Stopped(stopped, pids, f"stopped {', '.join(stopped)} ({len(pids)} processes)")


# Time a helper gets to undo a restart half done (stop what it launched, save
# the record) before SIGKILL.
HELPER_GRACE_S = 60.0


def _stop_helpers_first(place: statedir.Place, grace_s: float) -> list[int]:
    """Stop the record's helpers, after the same checks as the rest: a record
    naming a process that is not ours signals nothing (exit 2)."""
    record = statedir.load(place)
    if record is None or not record.helpers():
        return []
    statedir.check_host(record, place, "stop")
    procs.require_trusted(record, str(place.file), "stop")
    return helpers.stop(place, grace_s)


def _nothing(note: str | None) -> Stopped:
    if note is not None:
        statedir.warn(note)
    return Stopped((), (), "nothing to stop: no partitions recorded on this host")


def forget_cluster_address(record: HostRecord) -> None:
    """Remove Ray's "current cluster" file if it names the head we stopped, as
    `ray stop` does; a later plain `ray.init()` would try to join it."""
    try:
        path = Path(rayapi_address.address_file(flag_value(record.ray_args, "--temp-dir")))
    except RayApiMissing as e:
        log.warning("ray-accel: %s; Ray's current-cluster file is left as it is", e)
        return
    with suppress(OSError, ValueError):
        if read_bytes(path, 4096).decode("utf-8", "replace").strip() == record.gcs_address:
            path.unlink()
