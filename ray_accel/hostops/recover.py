"""`ray-accel start --recover`: finish a host change a crash interrupted,
then restart dead partitions with their recorded masks and ports, under the
host's lock. A record that names a live process that is not ours is refused
before anything is signalled or started; a restart that fails or is
interrupted stops what it started.

A change whose process (a repartition's helper, the decider) is gone is
finished from the step its record names (`change.advance`); one whose process
still runs is refused. A partition restarts serving what its record says it
serves (without the devices the health decider took out); one the decider
drains or stopped on purpose is left to it (`after`, given by the CLI, starts
the decider again where it is gone).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ray_accel.cluster import exporters, helpers, procs
from ray_accel.cluster import statedir as state
from ray_accel.cluster.auth import apply
from ray_accel.cluster.host import local_addresses
from ray_accel.cluster.launcher import Launches
from ray_accel.cluster.record import HostRecord
from ray_accel.cluster.recover import relaunch, terminate_raylet
from ray_accel.cluster.signals import interruptible, shielded
from ray_accel.core.errors import InputError, RayAccelError
from ray_accel.hostops import actions, change
from ray_accel.rayapi.gcs import Progress, wait_registered


def finish_change(place: state.Place, record: HostRecord, progress: Progress, timeout_s: float) -> HostRecord:
    """`record` with the change a crash interrupted finished (nothing to do
    without one); `InputError` while the process running it still runs."""
    pending = record.change
    if pending is None:
        return record
    owner = pending.owner
    if owner is not None and procs.check(owner).ours:
        raise InputError(
            f"a {pending.kind} is under way on this host (PID {owner.pid}, step {pending.step}); "
            "let it finish, or `ray-accel stop`"
        )
    progress(f"finishing the {pending.kind} interrupted at step {pending.step}")
    apply(record.auth)
    outcome = change.advance(place, record, progress, timeout_s)
    for failed in outcome.failed:
        progress(f"warning: {failed}")
    progress(f"the {pending.kind} interrupted at step {pending.step} is finished")
    record = outcome.record
    new = [t.name for t in pending.target if record.partition(t.name) is not None]
    actions.redeploy_exporters(record, new, progress)
    return record


def recover(progress: Progress, timeout_s: float = 180.0, after: helpers.After | None = None) -> HostRecord:
    """`ray-accel start --recover` (see the module doc): the record after it."""
    found = state.locate()
    place, note = found.place, found.note()
    nothing = "nothing to recover: no partitions recorded (use `ray-accel start`)"
    if place is None:
        raise InputError(nothing + (f"; {note}" if note else ""))
    with state.host_lock("start --recover", place), interruptible():
        record = state.load(place)
        if record is None:
            raise InputError(nothing)
        state.check_host(record, place, "start --recover")
        if record.legacy:
            raise InputError(
                f"state file {place.file} is an earlier ray-accel's record: start --recover restarts partitions "
                "from a record of this version; run `ray-accel stop`, then `ray-accel start`"
            )
        if record.host_ip not in local_addresses():
            raise InputError(
                f"state file {place.file} was written for node IP {record.host_ip}, which is not an address of "
                "this host now: its raylets cannot be restarted there; run `ray-accel stop`, then `ray-accel start`"
            )
        checks = procs.require_trusted(record, str(place.file), "start --recover")
        gcs = [checks[r] for p in record.raylets() for r in p.of_kind("gcs_server")]
        if gcs and not any(c.ours for c in gcs):
            raise RayAccelError(
                "the head's GCS is dead, so the cluster is gone: run `ray-accel stop`, then `ray-accel start`"
            )
        if record.change is not None:
            record = finish_change(place, record, progress, timeout_s)
            checks = procs.require_trusted(record, str(place.file), "start --recover")

        # A partition the decider drains or stopped stays as it is: the decider brings it back.
        dead = [p for p in record.partitions if not any(checks[r].ours for r in p.of_kind("raylet")) and not p.held]
        if not dead:
            progress("every partition is alive: nothing to recover")
            return after(record, progress) if after is not None else record
        token = record.auth.token_path
        if token is not None and not Path(token).is_file():
            raise InputError(f"the cluster's token file {token} is gone; cannot restart raylets")
        launches = Launches(log_dir=state.ensure_dir(place), timeout_s=timeout_s, forked=len(dead) > 1)
        try:
            for p in dead:
                # The raylet's leftovers (Ray's agents, workers) go first: they hold its ports.
                terminate_raylet(p, checks)
                new = relaunch(record, p, p.serving, dict(p.labels), launches, progress)
                record = state.save(record.replacing(new))
            launches.close()
            restarted = [q for q in record.partitions if q.name in {p.name for p in dead}]
            wait_registered(record.gcs_address, [q.node_id for q in restarted if q.node_id], timeout_s, progress)
        except BaseException:
            with shielded():
                launches.close()
                launches.undo()
                # What was restarted is gone again: the record says what still runs.
                gone = set(launches.processes())
                left = [replace(q, processes=tuple(r for r in q.processes if r not in gone)) for q in record.partitions]
                state.save(record.with_partitions(left))
            raise
        if record.metrics:
            record = exporters.deploy(record, restarted, progress)
        if after is not None:
            record = after(record, progress)
    return record
