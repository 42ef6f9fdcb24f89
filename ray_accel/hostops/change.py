"""A host change as a transaction: the one engine that takes a recorded
`HostChange` (a repartition, or the decider's shrink or return of one
partition) from the step its record names to its end.

Every step is written to the record before it is taken (`steps.announce`
then says it), and each can be taken again: so the process that began the
change (a repartition's helper, the decider) and `start --recover`, after
that process died at any step, run the same `advance` on the record as they
find it, and it ends the same way:

1. `drain`: each touched partition whose raylet still runs is saved
   draining (deadline and why), then drained through Ray.
2. `leave`: their metrics exporters leave the drained raylets (an exporter
   would keep a raylet busy until the deadline).
3. `wait`: until Ray has ended those raylets, or the drain's deadline.
4. `stop`: each touched partition with a process left is stopped by PID,
   then saved stopped, nothing of it running.
5. `launch`: each target partition, in order: whatever an earlier try of
   its launch left is stopped first (the launcher writes itself down before
   it starts anything), then its raylet starts. It enters the record in the
   same save that drops the touched partitions whose devices it takes, so
   the record never holds a device twice. A launch that fails leaves the
   partition's devices unassigned with its share (a repartition), or its
   partition stopped (a shrink or return: the decider tries again).
6. `register`: until the GCS has every new raylet; one that does not
   register in time is stopped and handled as a failed launch.
7. `finish`: touched partitions whose devices no target took leave the
   record (a repartition), the change leaves it, and the new partitions'
   exporters start.

Interrupted (SIGTERM from `stop`, Ctrl-C), it stops only what a launch
under way had started and not yet recorded, and leaves the change in the
record for `stop` (which stops everything it names) or `start --recover`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ray_accel.cluster import auth, launcher, procs
from ray_accel.cluster import statedir as state
from ray_accel.cluster.host import Share, check_free
from ray_accel.cluster.launcher import Launches
from ray_accel.cluster.record import HostChange, HostRecord, PartitionEntry, RayProcess, Spare
from ray_accel.cluster.recover import recorded_share, relaunch
from ray_accel.cluster.signals import shielded
from ray_accel.core.errors import InputError, RayAccelError
from ray_accel.core.health import one_line
from ray_accel.core.health_state import PartitionState, PartState
from ray_accel.hostops import driver_ops, steps
from ray_accel.hostops.drain import drain
from ray_accel.rayapi.gcs import Progress, registered_within

POLL_S = 0.5


@dataclass(frozen=True)
class Outcome:
    """How a change ended: the record after it, and what did not start."""

    record: HostRecord
    failed: tuple[str, ...] = ()  # "<partition>: <why>", one per target that did not start


def begin(record: HostRecord, change: HostChange) -> HostRecord:
    """`record` with `change` under way, saved: the first step, taken before anything else."""
    if record.change is not None:
        raise RayAccelError(f"a {record.change.kind} is already under way on this host (step {record.change.step})")
    return state.save(replace(record, change=change))


def _at(record: HostRecord, step: str) -> HostRecord:
    """`record` with its change at `step`, saved."""
    assert record.change is not None
    return state.save(replace(record, change=replace(record.change, step=step)))


def _ours(p: PartitionEntry) -> list[RayProcess]:
    """`p`'s recorded processes that are still the ones recorded."""
    protected = procs.never_signal()
    return [r for r in p.processes if procs.check(r, protected).ours]


def _raylet_runs(p: PartitionEntry) -> bool:
    raylet = p.raylet()
    return raylet is not None and procs.check(raylet).ours


def line(text: str) -> str:
    """`text` as the record keeps a reason: one line of printable characters
    (a launcher's log tail may hold colour codes and line breaks)."""
    return one_line("".join(c if c.isprintable() else " " for c in text), 1000)


def _held(p: PartitionEntry, state_: PartState, detail: str, deadline: float | None = None) -> PartitionEntry:
    return replace(p, health=PartitionState(state_, time.time(), line(detail), deadline))


def advance(place: state.Place, record: HostRecord, progress: Progress, timeout_s: float) -> Outcome:
    """Take `record`'s change from the step it names to its end (see the
    module doc), under the host's lock the caller holds."""
    change = record.change
    if change is None:
        return Outcome(record)
    if change.step == steps.PLANNED:
        steps.announce(steps.PLANNED, f"{change.kind} recorded", progress)
    touched = [p for p in record.partitions if p.name in change.touched]
    drained: list[str] = []
    for p in touched:
        node = p.node_id
        if not _raylet_runs(p) or node is None:
            continue
        message = drain_message(change, p.name)
        if not p.held:  # one the decider drains already keeps its state (and its deadline)
            p = _held(p, PartState.DRAINING, message, change.deadline)
        record = _at(record.replacing(p), steps.DRAIN)
        steps.announce(steps.DRAIN, f"draining node {node[:12]} of {p.name}", progress, p.name)
        progress(f"{p.name}: draining node {node[:12]} (deadline {_left(change.deadline)})")
        try:
            drain(record, node, message, change.deadline)
            drained.append(node)
        except RayAccelError as e:  # its raylet is stopped at the deadline all the same
            progress(f"warning: {p.name}: {e}")
    if drained and record.metrics:
        record = _at(record, steps.LEAVE)
        steps.announce(steps.LEAVE, "the drained partitions' metrics exporters leave", progress)
        leave = driver_ops.DriverOp("leave", record.gcs_address, node_ids=tuple(drained))
        try:
            driver_ops.run(leave, auth.raylet_base_env(record.auth))
        except RayAccelError as e:
            progress(f"warning: metrics exporters of the drained partitions not stopped: {e}")
    if touched:  # taken even when Ray has ended them all already: the same steps every time
        record = _at(record, steps.WAIT)
        steps.announce(steps.WAIT, f"until Ray ends {', '.join(p.name for p in touched)}", progress)
        _wait_ended(touched, change.deadline, progress)
    for p in [p for p in record.partitions if p.name in change.touched]:
        if p.processes:
            record = _at(record, steps.STOP)
            steps.announce(steps.STOP, f"stopping what is left of {p.name}", progress, p.name)
            procs.terminate([r.record for r in _ours(p)])
            stopped = _held(replace(p, processes=(), node_id=None), PartState.STOPPED, f"{change.kind}: stopped")
            record = state.save(record.replacing(stopped))
    failed: list[str] = []
    started: list[PartitionEntry] = []
    for target in change.target:
        record = _at(record, steps.LAUNCH)
        steps.announce(steps.LAUNCH, f"starting {target.name}", progress, target.name)
        record, entry, why = _launch(place, record, target, progress, timeout_s)
        if entry is not None:
            started.append(entry)
        else:
            failed.append(f"{target.name}: {why}")
    if started:
        record = _at(record, steps.REGISTER)
        steps.announce(steps.REGISTER, f"until the GCS has {', '.join(p.name for p in started)}", progress)
        nodes = [p.node_id for p in started if p.node_id]
        up, last_error = registered_within(record.gcs_address, nodes, timeout_s, progress)
        for p in started:
            if p.node_id not in up:
                why = f"did not register within {timeout_s:g}s" + (f" ({last_error})" if last_error else "")
                record = _unstart(record, p, why, progress)
                failed.append(f"{p.name}: {why}")
    record = _at(record, steps.FINISH)
    steps.announce(steps.FINISH, f"{change.kind} done", progress)
    record = _finish(record)
    return Outcome(record, tuple(failed))


def drain_message(change: HostChange, name: str) -> str:
    """What Ray's drain of touched partition `name` says (and its node's death message, once it ends)."""
    after = next((t for t in change.target if t.name == name), None)
    what = "removed" if after is None else f"restarted with devices {','.join(after.serving.device_ids)}"
    return f"ray-accel {change.kind}: partition {name} is drained and {what}"


def _left(deadline: float | None) -> str:
    return "none" if deadline is None else f"{max(0.0, deadline - time.time()):.0f}s"


def _wait_ended(parts: Sequence[PartitionEntry], deadline: float | None, progress: Progress) -> None:
    """Until the raylets of `parts` have ended, or `deadline`."""
    names = ", ".join(p.name for p in parts)
    while deadline is not None and time.time() < deadline:
        if not any(_raylet_runs(p) for p in parts):
            progress(f"{names}: ended by Ray once idle")
            return
        time.sleep(POLL_S)
    progress(f"{names}: drain deadline reached; stopping their raylets")


def _launch(
    place: state.Place, record: HostRecord, target: PartitionEntry, progress: Progress, timeout_s: float
) -> tuple[HostRecord, PartitionEntry | None, str]:
    """Start `target`'s raylet; the record with it in (or, failed, without
    it), its entry (None: failed) and why it failed."""
    assert record.change is not None
    stale = launcher.stop_leftovers(place.directory, [target.name])
    if stale:
        progress(f"{target.name}: stopped {len(stale)} processes an earlier try of its launch left")
    launches = Launches(log_dir=state.ensure_dir(place), timeout_s=timeout_s)
    try:
        check_free(target.ports.named.values(), f"starting {target.name}")
        entry = relaunch(record, target, target.serving, dict(target.labels), launches, progress)
    except (RayAccelError, InputError) as e:
        launches.undo()
        return _failed(record, target, str(e), progress), None, str(e)
    except BaseException:
        with shielded():
            stopped = launches.undo()  # not yet recorded: nobody else could stop it
            progress(f"{target.name}: restart interrupted: stopped the {len(stopped)} processes it had started")
        raise
    return _enter(record, entry), entry, ""


def _taken_by(record: HostRecord, entry: PartitionEntry) -> set[str]:
    """The touched partitions `entry` replaces: its name's, and those whose devices it takes."""
    assert record.change is not None
    return {
        p.name
        for p in record.partitions
        if p.name in record.change.touched and (p.name == entry.name or set(p.device_ids) & set(entry.device_ids))
    }


def _enter(record: HostRecord, entry: PartitionEntry) -> HostRecord:
    """The record with `entry` running, in the place of the first touched
    partition it replaces (or last), out of the change's target."""
    assert record.change is not None
    gone = _taken_by(record, entry)
    parts = list(record.partitions)
    first = next((i for i, p in enumerate(parts) if p.name in gone), len(parts))
    parts = [*parts[:first], entry, *(p for p in parts[first:] if p.name not in gone)]
    target = tuple(t for t in record.change.target if t.name != entry.name)
    return state.save(replace(record.with_partitions(parts), change=replace(record.change, target=target)))


def _failed(record: HostRecord, target: PartitionEntry, why: str, progress: Progress) -> HostRecord:
    """The record once `target` could not start: a repartition's devices
    left unassigned with its share, a shrink's or return's partition stopped."""
    assert record.change is not None
    change = replace(record.change, target=tuple(t for t in record.change.target if t.name != target.name))
    if record.change.kind != "repartition":
        stopped = _held(replace(target, processes=(), node_id=None), PartState.STOPPED, f"restart failed: {why}")
        stopped = replace(stopped, out=target.device_ids, out_core_ids=target.core_ids)
        progress(f"{target.name}: did not restart ({why}); it stays stopped")
        return state.save(replace(record.replacing(stopped), change=change))
    gone = _taken_by(record, target)
    spare = Spare(
        device_ids=target.device_ids, core_ids=target.core_ids, share=_share(record, target), reason=line(why)
    )
    progress(f"{target.name}: did not start ({why}); devices {','.join(target.device_ids)} are unassigned")
    parts = [p for p in record.partitions if p.name not in gone]
    return state.save(replace(record.with_partitions(parts), change=change, unassigned=(*record.unassigned, spare)))


def _share(record: HostRecord, p: PartitionEntry) -> Share:
    assert p.share is not None, "a change's target is planned with its share"
    return p.share


def _unstart(record: HostRecord, p: PartitionEntry, why: str, progress: Progress) -> HostRecord:
    """`p` started but did not register: stopped, and handled as a failed launch."""
    procs.terminate([r.record for r in _ours(p)])
    assert record.change is not None
    if record.change.kind != "repartition":
        stopped = _held(replace(p, processes=(), node_id=None), PartState.STOPPED, f"restart failed: {why}")
        progress(f"{p.name}: {why}; it stays stopped")
        return state.save(record.replacing(replace(stopped, out=p.device_ids, out_core_ids=p.core_ids)))
    spare = Spare(device_ids=p.device_ids, core_ids=p.core_ids, share=_share(record, p), reason=line(why))
    progress(f"{p.name}: {why}; devices {','.join(p.device_ids)} are unassigned")
    parts = [q for q in record.partitions if q.name != p.name]
    return state.save(replace(record.with_partitions(parts), unassigned=(*record.unassigned, spare)))


def _finish(record: HostRecord) -> HostRecord:
    """The record once its change is over: a repartition's touched
    partitions that no target replaced leave it, and so does the change."""
    change = record.change
    assert change is not None
    parts = list(record.partitions)
    unassigned = record.unassigned
    if change.kind == "repartition":
        # A touched partition no target replaced: its devices are unassigned, with its share.
        left = [p for p in parts if p.name in change.touched and not p.processes]
        unassigned += tuple(
            Spare(
                device_ids=p.device_ids, core_ids=p.core_ids, share=_recorded(record, p), reason="not in the new split"
            )
            for p in left
        )
        parts = [p for p in parts if p not in left]
    return state.save(
        replace(
            record.with_partitions(parts),
            change=None,
            mode=change.mode or record.mode,
            repartition=None if change.kind == "repartition" else record.repartition,
            unassigned=unassigned,
        )
    )


def _recorded(record: HostRecord, p: PartitionEntry) -> Share:
    return recorded_share(p, record)
