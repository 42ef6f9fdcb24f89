"""`ray-accel start --recover`: restart dead partitions with their recorded masks
and ports, under the host's lock. A record that names a live process that is
not ours is refused before anything is signalled or started; a restart that
fails or is interrupted stops what it started.

A partition restarts serving what its record says it serves (without the
devices the health decider took out); one the decider stopped on purpose is
left to it (`after`, given by the CLI, starts the decider again where it is
gone). `relaunch` is the one restart of one partition, shared with the
decider's shrink and return.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from ray_accel.bridge.managers import raylet_env
from ray_accel.cluster import exporters, helpers, procs, state
from ray_accel.cluster.auth import raylet_base_env
from ray_accel.cluster.host import Share, check_free, divide, local_addresses, read_host
from ray_accel.cluster.launcher import Launches
from ray_accel.cluster.raylet import RayOptions, partition_env, ray_start_args, user_figures
from ray_accel.cluster.signals import interruptible, shielded
from ray_accel.cluster.state import HostRecord, PartitionEntry, RayProcess
from ray_accel.core.errors import InputError, RayAccelError
from ray_accel.core.numa import read_topology
from ray_accel.partition.plan import Partition
from ray_accel.rayapi.gcs import Progress, wait_registered


def relaunch(
    record: HostRecord,
    p: PartitionEntry,
    part: Partition,
    extra_labels: Mapping[str, str],
    launches: Launches,
    progress: Progress,
) -> PartitionEntry:
    """Start partition `p`'s raylet again, serving `part` (all of its devices,
    or some), on its recorded ports and share, with ray-accel's labels
    `extra_labels` (the user's come from the record), from this process's
    environment with the cluster's auth and the bridge; the new entry, with
    the new raylet's processes. The old raylet and its leftovers must be gone
    (its ports are checked)."""
    check_free([p.ports.named["node_manager_port"], p.ports.named["object_manager_port"]], f"restarting {p.name}")
    own = record.spec.for_partition(part)
    share = recorded_share(p, record)
    labels = {**dict(record.labels), **extra_labels}
    args = ray_start_args(part, p.ports, own, share, RayOptions.read(record.ray_args), labels, record.gcs_address)
    base_env = raylet_base_env(record.auth)
    env = {**base_env, **raylet_env([record.spec], base_env)}
    progress(f"restarting {part.name}: {record.spec.visible_ids_env}={part.visible_ids}")
    (result,) = launches.run_all([(part.name, args, partition_env(env, own, part, share))])
    if not result.ok:
        raise RayAccelError(f"partition {part.name} did not restart: {result.error}")
    return replace(
        p,
        processes=result.processes,
        node_id=result.node_id,
        node_ip=result.node_ip,
        log=result.log,
        labels=tuple(extra_labels.items()),
    )


def recover(progress: Progress, timeout_s: float = 180.0, after: helpers.After | None = None) -> HostRecord:
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

        # A partition the decider drains or stopped stays as it is: the decider brings it back.
        dead = [p for p in record.partitions if not any(checks[r].ours for r in p.of_kind("raylet")) and not p.held]
        if not dead:
            progress("every partition is alive: nothing to recover")
            return after(record, progress) if after is not None else record
        token = record.auth.token_path
        if token is not None and not Path(token).is_file():
            raise InputError(f"the cluster's token file {token} is gone; cannot restart raylets")
        launches = Launches(state.ensure_dir(place), timeout_s)
        try:
            for p in dead:
                # The raylet's leftovers (Ray's agents, workers) go first: they hold its ports.
                terminate_raylet(p, checks)
                new = relaunch(record, p, p.serving, dict(p.labels), launches, progress)
                record = state.save(record.replacing(new))
            restarted = [q for q in record.partitions if q.name in {p.name for p in dead}]
            wait_registered(record.gcs_address, [q.node_id for q in restarted if q.node_id], timeout_s, progress)
        except BaseException:
            with shielded():
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


def terminate_raylet(p: PartitionEntry, checks: Mapping[RayProcess, procs.Check]) -> None:
    """Stop what is left of `p`'s raylet, ours only."""
    procs.terminate([r.record for r in p.processes if checks[r].ours])


def recorded_share(p: PartitionEntry, record: HostRecord) -> Share:
    """The share the partition was started with; a record from before shares
    were kept gets its part of the host by its units, as `start` divides it."""
    if p.share is not None:
        return p.share
    names = [q.name for q in record.partitions]
    weights = [len(q.core_ids) for q in record.partitions]
    host = read_host(user_figures(record.ray_args))
    return divide(names, weights, [() for _ in names], host, read_topology(), ()).shares[names.index(p.name)]
