"""A repartition's plan: the host's partitions as its record has them against
a new split, stated as `start` states one, planned by the same planner.

Per partition one of four actions: kept (same name, devices and units: its
raylet, node id, share and labels stay), restarted (same name, other
devices), removed (its name is not in the new split), added (a new name).
The new split is planned over the host's devices without those device
health keeps out of service; a manual spec naming one is refused, unless it
names the partition that holds the device out exactly as that partition was
planned: that partition is kept as it serves now (shrunk), and the device
returns to it when health lets it. Pure: the caller reads the record, the
devices and what is out of service.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from ray_accel.cluster.host import RayletPorts, Share
from ray_accel.cluster.raylet import Split
from ray_accel.cluster.record import HostRecord, PartitionEntry
from ray_accel.core.devices import Device
from ray_accel.core.reader import LOCAL
from ray_accel.partition.inherited import InheritedMask, restrict
from ray_accel.partition.plan import Mode, Partition, PartitionError, plan_partitions


class ChangeKind(enum.Enum):
    KEPT = "kept"
    RESTARTED = "restarted"
    REMOVED = "removed"
    ADDED = "added"


@dataclass(frozen=True)
class Change:
    """What happens to one partition: `devices` it serves after (a removed
    one: those it served), `part` as planned (None when removed; not in its
    JSON); for one that starts (restarted, added), its `share` of the host and
    its `ports`, once the change is planned whole."""

    partition: str
    action: ChangeKind
    devices: tuple[str, ...]
    part: Partition | None = field(default=None, metadata=LOCAL)
    share: Share | None = None
    ports: RayletPorts | None = None


@dataclass(frozen=True)
class Changes:
    """What `repartition --json` prints; the fields are its keys."""

    changes: bool
    partitions: tuple[Change, ...]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Resplit:
    mode: Mode
    changes: tuple[Change, ...]  # the record's partitions in its order, then the added ones
    warnings: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return any(c.action is not ChangeKind.KEPT for c in self.changes)

    def of(self, *actions: ChangeKind) -> list[Change]:
        return [c for c in self.changes if c.action in actions]

    def view(self) -> Changes:
        return Changes(self.changed, self.changes)


def out_of_service(record: HostRecord) -> frozenset[str]:
    """The devices the record says device health keeps out."""
    return frozenset(d for p in record.partitions for d in p.out)


def _kept(old: PartitionEntry, new: Partition) -> bool:
    # The same devices and units as planned: a shrunk partition too (its
    # devices out stay out until the decider returns them; restarting it
    # would drain what it serves for nothing). One the decider drains,
    # restores or stopped is its to bring back, not the new split's.
    return old.device_ids == new.device_ids and old.core_ids == new.core_ids and not old.held


def _holds_out(record: HostRecord, new: Partition, device: str) -> bool:
    """`new` names `device`, out of service, only because it is the partition
    that holds it out, as planned and kept: it stays out, nothing restarts."""
    old = next((p for p in record.partitions if p.name == new.name), None)
    return old is not None and device in old.out and _kept(old, new)


def resplit(record: HostRecord, devices: Sequence[Device], split: Split, out: Collection[str]) -> Resplit:
    """The plan taking `record`'s partitions to `split` over `devices` (the
    host's, as its backend lists them), none of `out` in service;
    `PartitionError` (exit 2) naming the value that cannot be planned."""
    mode = Mode.parse(split.mode)
    mask = record.inherited_mask
    if mask is not None:  # by core, as `start` planned within it: a device may be partly inside
        devices = restrict(devices, InheritedMask(mask.env, mask.value, mask.visible_ids, record.spec.resource_name))
    usable = devices if mode is Mode.MANUAL else [d for d in devices if d.id not in out]
    plan = plan_partitions(
        usable, mode, split.partitions, split.manual, record.spec.accelerator_type, traits=record.spec.traits
    )
    for p in plan:
        bad = next((d for d in p.device_ids if d in out and not _holds_out(record, p, d)), None)
        if bad is not None:
            raise PartitionError(
                f"partition {p.name!r}: device {bad} is out of service (device health keeps it out until it is "
                "healthy again, or cleared with `ray-accel health clear`)"
            )
    new = {p.name: p for p in plan}
    changes = [
        Change(old.name, ChangeKind.REMOVED, old.serving.device_ids)
        if (part := new.get(old.name)) is None
        else Change(old.name, ChangeKind.KEPT, old.serving.device_ids, part)
        if _kept(old, part)
        else Change(old.name, ChangeKind.RESTARTED, part.device_ids, part)
        for old in record.partitions
    ]
    known = {p.name for p in record.partitions}
    changes += [Change(p.name, ChangeKind.ADDED, p.device_ids, p) for p in plan if p.name not in known]
    return Resplit(mode, tuple(changes), plan.warnings)
