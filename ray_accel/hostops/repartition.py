"""`ray-accel repartition`: a new split of a running host, the partitions it
does not touch left running.

The split is `cluster.resplit`'s (kept, restarted, removed, added). Before
anything is touched the change is planned whole (`plan_change`): each
partition to start gets its share of the host (the shares of the partitions
that stop, and of devices left unassigned, divided by units), its port block
(a restarted one keeps its own; an added one the first free block from the
start's --port-base, clear of every recorded raylet's ports and worker
ports), its labels and its mask; whatever cannot be planned is an
`InputError` (exit 2), with no drain asked.

The change then runs as a transaction (`ray_accel.hostops.change`): the CLI
records it, with the host helper that runs it (`python -m
ray_accel.hostops.repartition INPUTS`, in a session of its own: `stop` stops
it first), and follows its log; the helper takes the host's lock and keeps it
to the end, so the decider's actions wait (`Busy`) and no start, stop or
recover runs beside it. After a crash at any step, `start --recover` finishes
the change from the step the record names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from ray_accel.cluster import auth, helpers, procs
from ray_accel.cluster import statedir as state
from ray_accel.cluster.host import (
    FIRST_WORKER_OFFSET,
    LAST_PORT,
    SEARCH_FROM,
    HostResources,
    RayletPorts,
    divide_host,
    is_free,
    raylet_ports,
    worker_port_count,
)
from ray_accel.cluster.raylet import Split
from ray_accel.cluster.record import REPARTITION_KIND, HostChange, HostRecord, PartitionEntry, Spare
from ray_accel.cluster.recover import recorded_share
from ray_accel.cluster.resplit import ChangeKind, Changes, Resplit, resplit
from ray_accel.cluster.signals import interruptible, shielded
from ray_accel.core.devices import Device
from ray_accel.core.errors import InputError, RayAccelError
from ray_accel.core.files import write_atomic
from ray_accel.core.health_kept import out_of_service
from ray_accel.core.hosts import HostId
from ray_accel.hostops import change, steps
from ray_accel.partition.plan import topology_labels
from ray_accel.plugins.discovery import discover
from ray_accel.rayapi.gcs import Progress

LOG_FILE = "repartition.log"
RESULT_FILE = "repartition.json"
WHAT = "the repartition"
LOCK_WAIT_S = 30.0
POLL_S = 0.5


@dataclass(frozen=True)
class Inputs(helpers.HelperInputs):
    """What the helper is started with (one value on its command line)."""

    timeout_s: float


@dataclass(frozen=True)
class Planned:
    """A repartition planned whole: the split's changes and the partitions it starts, each with its share,
    ports and labels."""

    resplit: Resplit
    target: tuple[PartitionEntry, ...]
    warnings: tuple[str, ...] = ()
    # The unassigned devices (with their shares) the partitions it starts take.
    spares_taken: tuple[Spare, ...] = ()

    def view(self) -> Changes:
        """What `repartition --json` prints: each change, with the share and ports of one that starts."""
        by_name = {t.name: t for t in self.target}
        changes = tuple(
            replace(c, share=by_name[c.partition].share, ports=by_name[c.partition].ports)
            if c.partition in by_name
            else c
            for c in self.resplit.changes
        )
        return Changes(self.resplit.changed, changes, self.warnings)


def planned(split: Split) -> tuple[state.Place, HostRecord, Planned]:
    """This host's record and the change taking it to `split`, planned whole;
    `InputError` when there is nothing to repartition or it cannot be planned."""
    found = state.locate()
    record = None if found.place is None else state.load(found.place)
    if found.place is None or record is None:
        raise InputError("nothing to repartition: no partitions recorded on this host (use `ray-accel start`)")
    if record.stopping:
        raise InputError(f"the partitions of {found.place.file} are being stopped")
    devices = tuple(discover(record.spec.backend).require_primary().list_devices())
    recorded = [d for p in record.partitions for d in p.out]
    out = out_of_service(found.place.directory, recorded, now=time.time()).devices
    return found.place, record, plan_change(record, devices, split, frozenset(out))


def plan_change(
    record: HostRecord,
    devices: Sequence[Device],
    split: Split,
    out: frozenset[str],
    free: Callable[[int], bool] = is_free,
) -> Planned:
    """The change taking `record` to `split` over the host's `devices`, none
    of `out` in service, planned whole (see the module doc); `free` says
    whether a port is free now."""
    plan = resplit(record, devices, split, out)
    parts = [c.part for c in plan.of(ChangeKind.RESTARTED, ChangeKind.ADDED) if c.part is not None]
    if not parts:
        return Planned(plan, (), plan.warnings)
    old = {p.name: p for p in record.partitions}
    starting = {d for p in parts for d in p.device_ids}
    # A stopped partition's share goes to the new ones where they take its devices; one whose
    # devices no new partition takes keeps its share, with its devices left unassigned (`change`).
    stopping = [
        c for c in plan.of(ChangeKind.RESTARTED, ChangeKind.REMOVED) if set(old[c.partition].device_ids) & starting
    ]
    spares = tuple(s for s in record.unassigned if set(s.device_ids) <= starting)
    freed = [recorded_share(old[c.partition], record) for c in stopping] + [s.share for s in spares]
    pool = HostResources(
        cpus=sum(s.cpus for s in freed),
        memory=sum(s.memory for s in freed),
        object_store_memory=sum(s.object_store_memory for s in freed),
        resources={k: sum(s.resources.get(k, 0.0) for s in freed) for s in freed for k in s.resources},
    )
    numa = [{d.numa_node for d in devices if d.id in p.device_ids} for p in parts]
    division = divide_host(parts, numa, pool)  # `ShareError` (exit 2) naming a figure that cannot be divided
    taken = [*(q.ports for q in record.raylets())]
    blocks: dict[str, RayletPorts] = {}
    for p, share in zip(parts, division.shares, strict=True):
        if p.name in old:
            blocks[p.name] = old[p.name].ports
            continue
        workers = record.max_workers or worker_port_count(share.cpus, len(p.core_ids))
        blocks[p.name] = free_block(workers, record.port_base, taken, free)
        taken.append(blocks[p.name])
    host = HostId(record.host, record.host_ip or "0.0.0.0")
    labels = topology_labels(parts, devices, host, record.spec.family, record.spec.resource_name)
    target = tuple(
        PartitionEntry(
            name=p.name,
            device_ids=p.device_ids,
            core_ids=p.core_ids,
            head=False,
            ports=blocks[p.name],
            processes=(),
            accelerator_type=p.accelerator_type,
            models=p.models,
            share=share,
            labels=tuple(labels[p.name].items()),
        )
        for p, share in zip(parts, division.shares, strict=True)
    )
    return Planned(plan, target, (*plan.warnings, *division.warnings), spares)


def free_block(
    workers: int, base: int | None, taken: Sequence[RayletPorts], free: Callable[[int], bool]
) -> RayletPorts:
    """The first block of ports for a raylet with `workers` worker ports, from
    `base` (the start's --port-base, else the default range) upward, clear of
    every port and worker port of `taken` and free now; `PortError` naming
    the range searched when there is none."""
    from ray_accel.cluster.host import PortError

    used = [(b.base, b.max_worker_port) for b in taken]
    first = base if base is not None else SEARCH_FROM
    candidate = first
    span = FIRST_WORKER_OFFSET + workers
    while candidate + span - 1 <= LAST_PORT:
        block = raylet_ports(candidate, workers)
        end = block.max_worker_port
        clash = [hi for lo, hi in used if lo <= end and candidate <= hi]
        if clash:
            candidate = max(clash) + 1
            continue
        busy = next((p for p in block.all() if not free(p)), None)
        if busy is None:
            return block
        candidate = busy + 1
    raise PortError(
        f"no free block of {span} ports from {first} to {LAST_PORT} clear of this host's raylets; "
        "stop something, or start the host again with another --port-base"
    )


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


def run(inputs: Inputs, progress: Progress) -> change.Outcome:
    """The recorded repartition, under the host's lock (see the module doc)."""
    place = inputs.place
    with _lock(place), interruptible():
        record = state.load(place)
        if record is None or record.created != inputs.created or record.change is None:
            raise RayAccelError("the host record is gone, another start's, or names no repartition")
        owner = record.change.owner
        if owner is None or owner.pid != os.getpid():
            raise RayAccelError(f"the host record's repartition is another process's ({owner})")
        auth.apply(record.auth)  # the GCS is asked with the cluster's token, if it has one
        return change.advance(place, record, progress, inputs.timeout_s)


def begin(
    place: state.Place, split: Split, drain_deadline_s: float, timeout_s: float
) -> tuple[subprocess.Popen[bytes], Path, Planned]:
    """Under the lock of the host at `place`: plan the change again, start the
    helper, and record both (the change at its first step); its handle, log
    and plan. `InputError` when the split cannot be planned or another change
    is under way."""
    with state.host_lock("repartition", place):
        place, record, plan = planned(split)
        if record.change is not None:
            owner = record.change.owner
            running = owner is not None and procs.check(owner).ours
            who = (
                f"PID {owner.pid}"
                if running and owner
                else "its process is gone: `ray-accel start --recover` finishes it"
            )
            raise InputError(f"a {record.change.kind} is under way on this host (step {record.change.step}; {who})")
        if not plan.resplit.changed:
            raise InputError("nothing to change")
        log = state.ensure_dir(place) / LOG_FILE
        (place.directory / RESULT_FILE).unlink(missing_ok=True)
        inputs = Inputs(str(place.directory), record.created, place.explicit, timeout_s)
        helper, proc = helpers.spawn(REPARTITION_KIND, WHAT, inputs, log, record.spec.to_env())
        touched = tuple(c.partition for c in plan.resplit.of(ChangeKind.RESTARTED, ChangeKind.REMOVED))
        recorded = HostChange(
            kind="repartition",
            step=steps.PLANNED,
            since=time.time(),
            owner=helper,
            touched=touched,
            target=plan.target,
            deadline=time.time() + drain_deadline_s,
            mode=plan.resplit.mode.value,
        )
        unassigned = tuple(s for s in record.unassigned if s not in plan.spares_taken)
        state.save(replace(record, repartition=helper, change=recorded, unassigned=unassigned))
    return proc, log, plan


def follow(proc: subprocess.Popen[bytes], log: Path, plan: Planned, progress: Progress) -> Changes:
    """Wait for the helper, its log's lines passed to `progress`; the plan it
    carried out, or `RayAccelError` with its last words. Ctrl-C (or SIGTERM)
    here stops it: the change stays recorded, for `start --recover`."""
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
    return plan.view()


def main(argv: Sequence[str] | None = None) -> int:
    inputs = helpers.read_inputs(Inputs, argv, "ray_accel.hostops.repartition")

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        outcome = run(inputs, say)
    except KeyboardInterrupt:
        say(f"{WHAT} stopped: the change stays recorded (`ray-accel start --recover` finishes it)")
        return 130
    except RayAccelError as e:
        say(f"{WHAT} failed: {e}")
        return 1
    if outcome.failed:
        say(f"{WHAT} failed: partition(s) did not start: {'; '.join(outcome.failed)}")
        return 1
    write_atomic(inputs.place.directory / RESULT_FILE, json.dumps({"ok": True}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
