"""What the decider does to a partition's raylet: save its state, stop it by
PID, restart it serving some of its devices (its drain: `drain`).

Stopping, restarting and saving a partition's state happen under the host's
lock, as `start`, `stop` and `--recover` do: a command that holds it makes
the decider try again next poll. A partition the decider signals is already
held in the host record (draining, restoring or stopped), so `start --block`
does not take the raylet's end for a failure. A restart is a host change
(`change`): recorded before each of its steps, so a decider killed at any
step leaves a record that `start --recover` finishes; one that fails leaves
the partition stopped, nothing of it running.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

from ray_accel.cluster import auth, procs
from ray_accel.cluster import statedir as state
from ray_accel.cluster.exporters import deployment
from ray_accel.cluster.record import HostChange, HostRecord, PartitionEntry, RayProcess
from ray_accel.cluster.recover import terminate_raylet
from ray_accel.core.devices import Device
from ray_accel.core.errors import RayAccelError
from ray_accel.core.health_state import PartitionState
from ray_accel.core.hosts import HostId
from ray_accel.hostops import change, driver_ops, steps
from ray_accel.partition.plan import (
    CONNECTED_LABEL,
    CORES_LABEL,
    DEVICES_LABEL,
    LINKS_LABEL,
    Partition,
    topology_labels,
)
from ray_accel.rayapi.gcs import Progress

TOPOLOGY_KEYS = (DEVICES_LABEL, CORES_LABEL, LINKS_LABEL, CONNECTED_LABEL)


class Busy(RayAccelError):
    """Another command holds the host's lock: try again next poll."""


@dataclass(frozen=True)
class Host:
    """What the actions need to know of the host beyond its record."""

    place: state.Place
    devices: tuple[Device, ...]  # every device of the host, as its backend lists them
    timeout_s: float = 180.0


def entry(record: HostRecord, name: str) -> PartitionEntry:
    found = next((p for p in record.partitions if p.name == name), None)
    if found is None:
        raise RayAccelError(f"partition {name} is no longer in the host record")
    return found


@contextmanager
def _current(
    host: Host, name: str, doing: str
) -> Iterator[tuple[HostRecord, PartitionEntry, dict[RayProcess, procs.Check]]]:
    """Under the host's lock for `doing` (`Busy` while another command holds
    it): the record, partition `name`'s entry, and the checks of the
    partitions' processes (the decider, this process, is never one to
    signal), or `RecordError` when one is not ours."""
    try:
        with state.host_lock(f"health decider {doing}", host.place):
            record = state.load(host.place)
            if record is None or record.stopping:
                raise RayAccelError("the host record is gone or being stopped")
            p = entry(record, name)
            checks = procs.require_trusted(replace(record, decider=None), str(host.place.file), "the health decider")
            yield record, p, checks
    except state.LockError as e:
        raise Busy(str(e)) from None


def save_state(host: Host, name: str, held: PartitionState) -> HostRecord:
    """The record with partition `name` in state `held`."""
    with _current(host, name, f"saving the state of {name}") as (record, p, _):
        return state.save(record.replacing(replace(p, health=held)))


def stop_partition(host: Host, name: str, held: PartitionState, progress: Progress) -> HostRecord:
    """Stop partition `name`'s raylet (and what Ray started for it) by PID;
    the record has it in state `held` (stopped), every device out: saved so
    before the first signal, then saved with nothing of it running."""
    with _current(host, name, f"stopping {name}") as (record, p, checks):
        raylet = p.raylet()
        record = state.save(record.replacing(replace(p, health=held)))
        pid = raylet.pid if raylet is not None else "-"
        steps.announce(steps.STOP, f"stopping raylet {pid} of {name}", progress, name)
        terminate_raylet(p, checks)
        return state.save(record.replacing(_stopped(p, held)))


def _stopped(p: PartitionEntry, held: PartitionState) -> PartitionEntry:
    """`p` with nothing of its raylet left, every device out."""
    return replace(p, processes=(), out=p.device_ids, out_core_ids=p.core_ids, health=held, node_id=None)


def relabel(p: PartitionEntry, part: Partition, devices: Sequence[Device], record: HostRecord) -> dict[str, str]:
    """The partition's labels for a raylet serving `part`: the same, with the
    topology labels (devices, cores, links) of what it serves now."""
    host = HostId(record.host, record.host_ip or "0.0.0.0")
    fresh = topology_labels([part], devices, host, record.spec.family, record.spec.resource_name)[part.name]
    kept = {k: v for k, v in p.labels if k not in TOPOLOGY_KEYS}
    return kept | {k: v for k, v in fresh.items() if k in TOPOLOGY_KEYS}


def restart_partition(
    host: Host, name: str, serve: Sequence[str], held: PartitionState, progress: Progress
) -> HostRecord:
    """Restart partition `name` serving the devices `serve` (its own ids, in
    its order): a host change of its own (`change`, kind shrink or return),
    recorded before its first step: what is left of its raylet stopped, a new
    one on its ports with its share, the mask and resources of `serve`, the
    same name and labels (topology labels of what it serves); then it is in
    state `held`. Under the host's lock; a restart that fails leaves it
    stopped, saying why (`RayAccelError`)."""
    with _current(host, name, f"restarting {name}") as (record, p, _):
        serve_ids = tuple(d for d in p.device_ids if d in set(serve))
        cores = tuple(sorted(c for d in host.devices if d.id in serve_ids for c in d.core_ids))
        part = Partition(name, serve_ids, cores, p.accelerator_type, p.models)
        out = tuple(d for d in p.device_ids if d not in serve_ids)
        target = replace(
            p,
            processes=(),
            node_id=None,
            labels=tuple(relabel(p, part, host.devices, record).items()),
            out=out,
            out_core_ids=tuple(c for c in p.core_ids if c not in cores),
            health=held,
        )
        recorded = HostChange(
            kind="shrink" if out else "return",
            step=steps.PLANNED,
            since=time.time(),
            owner=record.decider,
            touched=(name,),
            target=(target,),
            deadline=p.health.deadline,
        )
        record = change.begin(record, recorded)
        outcome = change.advance(host.place, record, progress, host.timeout_s)
        if outcome.failed:
            raise RayAccelError(f"restart failed: {outcome.failed[0]}")
        return outcome.record


def redeploy_exporters(record: HostRecord, names: Sequence[str], progress: Progress) -> None:
    """Start the metrics exporters of partitions `names` (those serving) again;
    the host's host-level values go to `host_level_partition`. A failure is
    reported, never fatal."""
    if not record.metrics:
        return
    parts = [p for p in record.partitions if p.name in names and p.health.state.exporting and p.node_id]
    if not parts:
        return
    op = driver_ops.DriverOp("exporters", record.gcs_address, deployment(record, parts))
    try:
        driver_ops.run(op, auth.raylet_base_env(record.auth))
        progress(f"metrics exporters of {', '.join(p.name for p in parts)} started")
    except RayAccelError as e:
        progress(f"warning: metrics exporters not restarted: {e}")
