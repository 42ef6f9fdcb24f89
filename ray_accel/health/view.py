"""What `ray-accel health` and `ray-accel jobs` show of the host's health:
payloads built from the host record and `health.json` (pure, but for
`locate_health`, which reads them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ray_accel.cluster import procs
from ray_accel.cluster import statedir as state
from ray_accel.cluster.record import HostRecord
from ray_accel.cluster.status import recorded
from ray_accel.core.errors import InputError, RayAccelError
from ray_accel.core.health_state import HostHealth, read_health, to_json
from ray_accel.core.reader import dump, dump_fields


@dataclass(frozen=True)
class Recorded:
    place: state.Place
    record: HostRecord
    health: HostHealth | None
    decider_alive: bool


def locate_health() -> Recorded:
    """This host's record and health file; "no cluster" (exit 1) when none is
    recorded (`status.recorded`)."""
    record, place = recorded()
    alive = record.decider is not None and procs.check(record.decider).ours
    return Recorded(place, record, read_health(place.directory), alive)


def partition_of(record: HostRecord) -> dict[str, str]:
    """Device id -> the partition it belongs to (as planned)."""
    return {d: p.name for p in record.partitions for d in p.device_ids}


def head_view(record: HostRecord) -> dict[str, str | int | bool | None] | None:
    """A head's own raylet, apart from the partitions: it has no devices, so no health."""
    if record.head_raylet is None:
        return None
    raylet = record.head_raylet.raylet()
    alive = raylet is not None and procs.check(raylet).ours
    return {"node_id": record.head_raylet.node_id, "pid": raylet.pid if raylet else None, "alive": alive}


def health_payload(found: Recorded) -> dict[str, Any]:
    """`ray-accel health --json`: every device with its state, since when, its
    last event and what makes it healthy again; every partition's state; the
    event counts and the last events."""
    record, health = found.record, found.health
    out: dict[str, Any] = {
        "host": record.host,
        "host_ip": record.host_ip,
        "state_file": str(found.place.file),
        "action": None if record.health is None else record.health.action.value,
        "decider": {"pid": None if record.decider is None else record.decider.pid, "alive": found.decider_alive},
        "head": head_view(record),
    }
    if health is None:
        return dict(out, at=None, polls=0, devices=[], partitions=[], events=[], counters={}, errors=[])
    from ray_accel.health.proof import repair_note

    owner = partition_of(record)
    # Each device's last check and repair, a check under way, and what a person must do.
    checks = {c.device_id: c for c in health.checks}
    repairs = {r.device_id: r for r in health.repairs}
    devices = [
        dump_fields(
            d,
            partition=owner.get(d.device_id),
            check=dump(checks.get(d.device_id)),
            checking=health.checking.get(d.device_id),
            repair=dump(repairs.get(d.device_id)),
            repair_note=repair_note(repairs.get(d.device_id)) or None,
        )
        for d in health.devices
    ]
    return {**out, **to_json(health), "devices": devices}


def check_clear(found: Recorded, device_id: str) -> None:
    """Refuse a clear that cannot be honoured: an unknown device (exit 2,
    naming it and the known ones), or a host started without a decider (exit 1)."""
    known = list(partition_of(found.record))
    if found.health is not None:
        known += [d.device_id for d in found.health.devices if d.device_id not in known]
    if device_id not in known:
        shown = ", ".join(known[:20]) + (", ..." if len(known) > 20 else "")
        raise InputError(f"device {device_id!r} is not a device of this host's partitions (devices: {shown})")
    if found.record.health is None:
        raise RayAccelError("this host's partitions were started without a health decider; nothing to clear")


def check_checkable(found: Recorded, device_id: str) -> None:
    """Refuse a check by hand that may not run (exit 2, naming the device): a
    device this host's partitions do not have, or one a raylet serves (or
    may, while its partition drains or a host change is under way)."""
    from ray_accel.health.rules import free_devices

    owner = partition_of(found.record)
    if device_id not in owner:
        shown = ", ".join(list(owner)[:20]) + (", ..." if len(owner) > 20 else "")
        raise InputError(f"device {device_id!r} is not a device of this host's partitions (devices: {shown})")
    if device_id not in free_devices(found.record):
        raise InputError(
            f"device {device_id} is served by partition {owner[device_id]}: a check runs only on a device "
            "out of service (`ray-accel health` shows which are)"
        )
