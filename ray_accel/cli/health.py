"""`ray-accel health [--json]`, `ray-accel health clear DEVICE` and
`ray-accel health check DEVICE`: every device of this host with its health,
since when, its last event, check and repair; every partition's state; a
hand-made "this device is fixed"; an active check of a device out of service
by hand (exit 0 passed, 1 otherwise, 2 on a device a partition serves).

Read from the host record and `health.json` (written by the host's decider
after every poll); like `top`, never starts anything: none recorded on this
host is "no cluster", exit 1; an unknown DEVICE for `clear` is exit 2.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from ray_accel.cli.output import ago, emit, json_option
from ray_accel.cli.params import CHECK_TIMEOUT
from ray_accel.cli.render import decider_line, table
from ray_accel.core.files import describe


def health_text(payload: Mapping[str, Any], now: float | None = None) -> str:
    now = time.time() if now is None else now
    decider = payload["decider"]
    heading = decider_line(decider["pid"], decider["alive"], payload["action"])
    if payload["at"] is not None:
        heading += f"; last poll {ago(payload['at'], now)} (poll {payload['polls']})"
    if raylet := payload.get("head"):
        heading += f"\nhead raylet (no devices): pid {raylet['pid']}, {'alive' if raylet['alive'] else 'DEAD'}"
    if payload["at"] is None:
        return heading + "\nno health state yet: the decider has not polled"
    counters = payload["counters"]
    devices = table(
        payload["devices"],
        ("DEVICE", lambda d: d["device_id"]),
        ("PARTITION", lambda d: d["partition"]),
        ("HEALTH", lambda d: d["state"]),
        ("SINCE", lambda d: ago(d["since"], now)),
        ("LAST EVENT", lambda d: (d["last_event"] or {}).get("reason", "-")),
        (
            "EVENTS",
            lambda d: ", ".join(f"{k} x{n}" for k, n in sorted(counters.get(d["device_id"], {}).items())) or "-",
        ),
        ("HEALTHY AGAIN WHEN", lambda d: d["healthy_again"] or "-"),
        ("LAST CHECK", lambda d: check_cell(d.get("check"), d.get("checking"), now)),
        ("LAST REPAIR", lambda d: repair_cell(d.get("repair"), d.get("repair_note"))),
    )
    parts = table(
        payload["partitions"],
        ("PARTITION", lambda p: p["partition"]),
        ("STATE", lambda p: p["state"]),
        ("SINCE", lambda p: ago(p["since"], now)),
        ("SERVING", lambda p: len(p["devices"])),
        ("OUT", lambda p: ",".join(p["out"]) or "-"),
        ("DETAIL", lambda p: p["detail"] or "-"),
    )
    errors = [f"error: {e}" for e in payload["errors"]]
    return "\n\n".join([heading, devices, parts, *(["\n".join(errors)] if errors else [])])


Kept = Mapping[str, str | float | int | None]  # a check or repair as `health --json` shows it


def check_cell(check: Kept | None, checking: float | None, now: float) -> str:
    """A device's last check in a few words (a check under way first)."""
    if checking:
        return f"checking since {ago(checking, now)}"
    if not check:
        return "-"
    ended = check["ended"]
    return f"{check['outcome']} {ago(float(ended) if ended is not None else None, now)}: {check['detail']}"


def repair_cell(repair: Kept | None, note: str | None) -> str:
    if not repair:
        return "-"
    return f"{repair['outcome']}: {note or repair['detail']}"


@click.group(invoke_without_command=True)
@json_option
@click.pass_context
def health(ctx: click.Context, as_json: bool) -> int:
    """Every device's health by its family's rule, and every partition's state."""
    if ctx.invoked_subcommand is not None:
        return 0
    from ray_accel.health.view import health_payload, locate_health

    return emit(as_json, health_payload(locate_health()), health_text)


def kept_dir_readable() -> Path | None:
    """Where the kept device health is (`start.kept_dir`), or a `StateError`
    (exit 2) naming the state folder when it may not be read."""
    from ray_accel.cluster.start import kept_dir
    from ray_accel.cluster.statedir import STATE_ENV, StateError, search_root

    try:
        return kept_dir()
    except OSError as e:
        shown = os.environ.get(STATE_ENV) or search_root()
        raise StateError(f"cannot read state directory {shown}: {describe(e)}") from None


def kept_file_present(path: Path) -> bool:
    """Whether the kept device health file is there; a `StateError` (exit 2)
    naming its folder when that may not be read (permission denied, a name
    too long), never a traceback."""
    from ray_accel.cluster.statedir import StateError

    try:
        return path.is_file()
    except OSError as e:
        raise StateError(f"cannot read state directory {path.parent}: {describe(e)}") from None


@health.command()
@click.argument("device_id", metavar="DEVICE")
@json_option
def clear(device_id: str, as_json: bool) -> int:
    """Say DEVICE is fixed: its unhealthy state is dropped, and its partition
    returns to service with it (drained again and restarted with its full mask).
    Where no decider runs (or no cluster, after `stop`), the kept device
    health is edited instead."""
    from ray_accel.cluster import statedir
    from ray_accel.core.errors import RayAccelError
    from ray_accel.core.health_kept import KEPT_FILE
    from ray_accel.health.proof import checks_anything
    from ray_accel.health.requests import ask_clear, check_by_hand, clear_kept, keep_check
    from ray_accel.health.rules import free_devices
    from ray_accel.health.view import Recorded, check_checkable, check_clear, locate_health

    def out_here(found: Recorded, device_id: str) -> bool:
        return device_id in free_devices(found.record)

    found: Recorded | None = None
    try:
        found = locate_health()
    except RayAccelError:
        directory = kept_dir_readable()
        if directory is None or not kept_file_present(directory / KEPT_FILE):
            raise
        place, out = statedir.Place(directory, directory / statedir.STATE_FILE, False), []
    else:
        check_clear(found, device_id)
        if found.decider_alive:
            request = ask_clear(found.place.directory, device_id)
            message = (
                f"asked the health decider to clear {device_id}; it acts at its next poll "
                "(`ray-accel health` shows the device and its partition)"
            )
            return emit(as_json, {"clear": device_id, "asked_at": request.at, "message": message}, lambda p: message)
        place, out = found.place, [d for p in found.record.partitions for d in p.out]
    settings = found.record.health if found is not None else None
    if found is not None and settings is not None and checks_anything(settings) and out_here(found, device_id):
        # No decider to check it before it returns: the check runs here, and a clear needs it passed.
        check_checkable(found, device_id)
        result = check_by_hand(found.record, device_id, settings.check_timeout_s)
        keep_check(found.place, result)
        if result.outcome.value != "passed":
            raise RayAccelError(
                f"not cleared: the check of {device_id} says {result.outcome.value}: {result.detail} "
                "(a device is cleared only once its check passes)"
            )
    path = clear_kept(place, out, device_id)
    message = (
        f"cleared {device_id} in {path} (no health decider runs); its partition serves it again once one "
        "does (`ray-accel start --recover`) or from the next `ray-accel start`"
    )
    return emit(as_json, {"clear": device_id, "asked_at": time.time(), "message": message}, lambda p: message)


@health.command()
@click.argument("device_id", metavar="DEVICE")
@click.option(
    "--timeout",
    "timeout_s",
    type=CHECK_TIMEOUT,
    default=None,
    help="seconds the check may take (default: the host's --check-timeout)",
)
@json_option
def check(device_id: str, timeout_s: float | None, as_json: bool) -> int:
    """Run the backend's active check of DEVICE, a device out of service (no
    partition serves it), and keep its outcome as the device's last check.
    Exit 0 when it passed, 1 otherwise; 2 on a device a partition serves."""
    from ray_accel.core.checks import DEFAULT_CHECK_TIMEOUT_S, CheckOutcome
    from ray_accel.core.reader import dump
    from ray_accel.health.requests import check_by_hand, keep_check
    from ray_accel.health.view import check_checkable, locate_health

    found = locate_health()
    check_checkable(found, device_id)
    settings = found.record.health
    limit = timeout_s if timeout_s is not None else settings.check_timeout_s if settings else DEFAULT_CHECK_TIMEOUT_S
    result = check_by_hand(found.record, device_id, limit)
    keep_check(found.place, result)
    emit(as_json, dump(result), lambda _: f"{device_id}: {result.outcome.value}: {result.detail}")
    return 0 if result.outcome is CheckOutcome.PASSED else 1
