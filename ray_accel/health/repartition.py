"""`ray-accel repartition`: a new split of a running host, the partitions it
does not touch left running.

The plan is `cluster.resplit`'s. The run is a host helper process (`python
-m ray_accel.health.repartition INPUTS`, in a session of its own, recorded
in the host record as `repartition`), so `stop` stops it first; it holds the
host's lock from its first step to its last (the decider waits for it).

1. Every partition the plan restarts or removes is drained through Ray, as
   the decider drains (preemption; the message names the repartition), and
   left for Ray to end once idle, its raylet stopped by PID at the drain's
   deadline at the latest. The record keeps it, nothing of it running.
2. Each new partition (restarted, or added) starts as `start --recover`
   starts one (`recover.relaunch`): its mask, labels and name, a restarted
   one on its own ports, an added one on a free block. It replaces the
   stopped entries whose devices it takes, in one save, so a SIGKILL at any
   step leaves a record of what runs. Kept partitions keep their shares; the
   shares of those that stopped are divided between the new ones in
   proportion to their units.
3. A new partition that fails to start is stopped whole and its devices are
   left unassigned (its stopped predecessors leave the record); the others
   go on. SIGTERM (from `stop`) undoes what was begun: what it started is
   stopped and the stopped entries stay in the record, for `start --recover`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from ray_accel.cluster import auth, helpers, procs, state
from ray_accel.cluster.host import HostResources, divide_host, plan_ports, worker_ports
from ray_accel.cluster.launcher import Launches
from ray_accel.cluster.raylet import Split
from ray_accel.cluster.recover import recorded_share, relaunch, terminate_raylet
from ray_accel.cluster.resplit import Action, Change, Changes, Resplit, out_of_service, resplit
from ray_accel.cluster.signals import interruptible, shielded
from ray_accel.cluster.state import REPARTITION_KIND, HostRecord, PartitionEntry, write_atomic
from ray_accel.core import reader
from ray_accel.core.devices import Device
from ray_accel.core.errors import InputError, RayAccelError
from ray_accel.core.health_kept import read_kept
from ray_accel.core.hosts import HostId
from ray_accel.health import actions, driver_ops
from ray_accel.partition.plan import topology_labels
from ray_accel.plugins.discovery import discover
from ray_accel.rayapi.gcs import Progress, wait_registered

LOG_FILE = "repartition.log"
RESULT_FILE = "repartition.json"
WHAT = "the repartition"
LOCK_WAIT_S = 30.0
POLL_S = 0.5


@dataclass(frozen=True)
class Inputs(helpers.HelperInputs):
    """What the helper is started with (one value on its command line)."""

    split: Split
    drain_deadline_s: float
    timeout_s: float


def planned(split: Split) -> tuple[state.Place, HostRecord, Resplit]:
    """This host's record and the plan taking it to `split`; `InputError`
    when there is nothing running to repartition or the split cannot be planned."""
    found = state.locate()
    record = None if found.place is None else state.load(found.place)
    if found.place is None or record is None:
        raise InputError("nothing to repartition: no partitions recorded on this host (use `ray-accel start`)")
    if record.stopping:
        raise InputError(f"the partitions of {found.place.file} are being stopped")
    return found.place, record, plan_of(found.place, record, split)[1]


def plan_of(place: state.Place, record: HostRecord, split: Split) -> tuple[tuple[Device, ...], Resplit]:
    """The host's devices and the plan taking `record` to `split`, without
    the devices device health keeps out of service: those the kept device
    health has out, and those the record has out (all a host has when the
    kept health cannot be read)."""
    devices = tuple(discover(record.spec.backend).require_primary().list_devices())
    return devices, resplit(record, devices, split, out_of_service(record) | read_kept(place.directory).out().keys())


def drain_message(c: Change) -> str:
    after = "removed" if c.part is None else f"restarted with devices {','.join(c.devices)}"
    return f"ray-accel repartition: partition {c.partition} is drained and {after}"


def new_entries(record: HostRecord, plan: Resplit, devices: Sequence[Device]) -> list[PartitionEntry]:
    """The entries of the partitions to start, not yet running: a restarted
    one on its ports, an added one on a free block; the shares of the
    stopped partitions divided between them by units."""
    parts = [c.part for c in plan.of(Action.RESTARTED, Action.ADDED) if c.part is not None]
    old = {p.name: p for p in record.partitions}
    freed = [recorded_share(old[c.partition], record) for c in plan.of(Action.RESTARTED, Action.REMOVED)]
    pool = HostResources(
        sum(s.cpus for s in freed),
        sum(s.memory for s in freed),
        sum(s.object_store_memory for s in freed),
        {k: sum(s.resources.get(k, 0.0) for s in freed) for s in freed for k in s.resources},
    )
    numa = [{d.numa_node for d in devices if d.id in p.device_ids} for p in parts]
    shares = divide_host(parts, numa, pool).shares
    added = [p for p in parts if p.name not in old]
    blocks = iter(plan_ports(worker_ports([len(p.core_ids) for p in added], None, None), None))
    host = HostId(record.host, record.host_ip or "0.0.0.0")
    labels = topology_labels(parts, devices, host, record.spec.family, record.spec.resource_name)
    return [
        PartitionEntry(
            name=p.name,
            device_ids=p.device_ids,
            core_ids=p.core_ids,
            head=False,
            ports=old[p.name].ports if p.name in old else next(blocks),
            processes=(),
            accelerator_type=p.accelerator_type,
            models=p.models,
            share=share,
            labels=tuple(labels[p.name].items()),
        )
        for p, share in zip(parts, shares, strict=True)
    ]


def _wait_ended(parts: Sequence[PartitionEntry], deadline: float, progress: Progress) -> None:
    """Until Ray has ended the raylets of `parts`, or `deadline`."""
    raylets = [r for p in parts if (r := p.raylet()) is not None]
    names = ", ".join(p.name for p in parts)
    while time.time() < deadline:
        if not any(procs.check(r).ours for r in raylets):
            progress(f"{names}: ended by Ray once idle")
            return
        time.sleep(POLL_S)
    progress(f"{names}: drain deadline reached; stopping their raylets")


def _replacing(parts: Sequence[PartitionEntry], gone: set[str], entry: PartitionEntry) -> list[PartitionEntry]:
    """`parts` with `entry` in the place of the first of `gone`, the others of them out."""
    first = next((i for i, p in enumerate(parts) if p.name in gone), len(parts))
    return [*parts[:first], entry, *(p for p in parts[first:] if p.name not in gone)]


def _lock(place: state.Place) -> ExitStack:
    """The host's lock, once the command that started this helper has let it go."""
    until = time.monotonic() + LOCK_WAIT_S
    while True:
        held = ExitStack()
        try:
            held.enter_context(state.host_lock("repartition", place))
            return held
        except state.LockError:
            if time.monotonic() > until:
                raise
            time.sleep(POLL_S)


def run(inputs: Inputs, progress: Progress) -> Resplit:
    """The repartition, under the host's lock (see the module doc)."""
    place = inputs.place
    with _lock(place), interruptible():
        record = state.load(place)
        if record is None or record.created != inputs.created or record.repartition is None:
            raise RayAccelError("the host record is gone, another start's, or names no repartition")
        if record.repartition.pid != os.getpid():
            raise RayAccelError(f"the host record names another repartition (PID {record.repartition.pid})")
        try:
            return _run(place, record, inputs, progress)
        finally:
            with shielded():
                now = state.load(place)
                if now is not None and now.repartition == record.repartition:
                    state.save(replace(now, repartition=None))


def _run(place: state.Place, record: HostRecord, inputs: Inputs, progress: Progress) -> Resplit:
    auth.apply(record.auth)  # the GCS is asked with the cluster's token, if it has one
    devices, plan = plan_of(place, record, inputs.split)
    touched = {c.partition for c in plan.of(Action.RESTARTED, Action.REMOVED)}
    old = {p.name: p for p in record.partitions if p.name in touched}
    checks = procs.require_trusted(replace(record, repartition=None), str(place.file), WHAT)
    deadline = time.time() + inputs.drain_deadline_s
    drained = []
    for c in plan.of(Action.RESTARTED, Action.REMOVED):
        node, raylet = old[c.partition].node_id, old[c.partition].raylet()
        if node is not None and raylet is not None and checks[raylet].ours:
            progress(f"{c.partition}: draining node {node[:12]} (deadline {inputs.drain_deadline_s:g}s)")
            actions.drain(record, node, drain_message(c), deadline)
            drained.append(node)
    if drained and record.metrics:
        # Their exporters (actors) would keep the drained raylets from ending until the deadline.
        leave = driver_ops.DriverOp("leave", record.gcs_address, node_ids=tuple(drained))
        try:
            driver_ops.run(leave, auth.raylet_base_env(record.auth))
        except RayAccelError as e:
            progress(f"warning: metrics exporters of the drained partitions not stopped: {e}")
    _wait_ended(list(old.values()), deadline, progress)
    now = procs.check_record(replace(record, repartition=None))
    for p in old.values():
        terminate_raylet(p, now)
    # The record keeps the touched partitions, nothing of them running.
    stopped = [replace(p, processes=(), node_id=None) if p.name in touched else p for p in record.partitions]
    record = state.save(record.with_partitions(stopped))
    launched: list[Launches] = []  # one per new partition, so a failed one is stopped alone
    before, failed = record, []
    try:
        for new in new_entries(record, plan, devices):
            launched.append(launches := Launches(state.ensure_dir(place), inputs.timeout_s))
            # The stopped partitions whose devices it takes leave the record as it enters.
            gone = {
                p.name
                for p in record.partitions
                if p.name in touched and (p.name == new.name or set(p.device_ids) & set(new.device_ids))
            }
            try:
                entry = relaunch(record, new, new.partition, dict(new.labels), launches, progress)
            except RayAccelError as e:
                launches.undo()
                progress(f"{new.name}: did not start ({e}); devices {','.join(new.device_ids)} are unassigned")
                failed.append(f"{new.name}: {e}")
                record = state.save(record.with_partitions([p for p in record.partitions if p.name not in gone]))
                continue
            record = state.save(record.with_partitions(_replacing(record.partitions, gone, entry)))
        new_names = {c.partition for c in plan.of(Action.RESTARTED, Action.ADDED)}
        started = [p.node_id for p in record.partitions if p.name in new_names and p.node_id]
        wait_registered(record.gcs_address, started, inputs.timeout_s, progress)
    except BaseException:
        with shielded():
            undone = [pid for launches in launched for pid in launches.undo()]
            progress(f"repartition interrupted: stopped the {len(undone)} processes it had started")
            # The split as it was, its touched partitions stopped: `start --recover` restarts them.
            state.save(before)
        raise
    # A removed partition whose devices no new one took leaves the record too.
    left = [p for p in record.partitions if p.name not in touched or p.raylet() is not None]
    record = state.save(replace(record.with_partitions(left), mode=plan.mode.value))
    actions.redeploy_exporters(record, sorted(new_names), progress)
    if failed:
        raise RayAccelError(f"partition(s) did not start: {'; '.join(failed)}")
    return plan


def begin(
    place: state.Place, split: Split, drain_deadline_s: float, timeout_s: float
) -> tuple[subprocess.Popen[bytes], Path]:
    """Under the lock of the host at `place`: plan again, start the helper and
    record it; its handle and log. `InputError` when the split cannot be
    planned or another repartition runs."""
    with state.host_lock("repartition", place):
        place, record, _ = planned(split)
        if record.repartition is not None and procs.check(record.repartition).ours:
            raise InputError(f"a repartition is running on this host (PID {record.repartition.pid})")
        inputs = Inputs(str(place.directory), record.created, place.explicit, split, drain_deadline_s, timeout_s)
        log = state.ensure_dir(place) / LOG_FILE
        (place.directory / RESULT_FILE).unlink(missing_ok=True)
        helper, proc = helpers.spawn(REPARTITION_KIND, WHAT, inputs, log, record.spec.to_env())
        state.save(replace(record, repartition=helper))
    return proc, log


def follow(proc: subprocess.Popen[bytes], log: Path, progress: Progress) -> Changes:
    """Wait for the helper, its log's lines passed to `progress`; its result,
    or `RayAccelError` with its last words. Ctrl-C (or SIGTERM) here stops it
    as `stop` would: it undoes what it began."""
    done = 0

    def relay() -> None:
        nonlocal done
        text = log.read_text(errors="replace") if log.exists() else ""
        for line in text[done:].splitlines():
            progress(line)
        done = len(text)

    with interruptible():
        try:
            while proc.poll() is None:
                relay()
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            with shielded():
                proc.terminate()
                proc.wait()
                relay()
            raise
    relay()
    result = log.parent / RESULT_FILE
    if proc.returncode != 0 or not result.exists():
        last = (log.read_text(errors="replace").strip().splitlines() or [""])[-1]
        raise RayAccelError(f"{WHAT} failed (exit {proc.returncode}): {last or 'no output'}; see {log}")
    return reader.load(Changes, reader.parse_json(result.read_text(), str(result)), str(result))


def main(argv: Sequence[str] | None = None) -> int:
    inputs = helpers.read_inputs(Inputs, argv, "ray_accel.health.repartition")

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        plan = run(inputs, say)
    except KeyboardInterrupt:
        say(f"{WHAT} stopped: what it began is undone")
        return 130
    except RayAccelError as e:
        say(f"{WHAT} failed: {e}")
        return 1
    write_atomic(inputs.place.directory / RESULT_FILE, json.dumps(reader.dump(plan.view())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
