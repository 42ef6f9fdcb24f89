"""Hand-made requests to the host's decider: `ray-accel health clear DEVICE`,
and the result of `ray-accel health check DEVICE` for it to keep.

The CLI cannot reach into the decider's process (the health monitor and its
sticky states live there), so it leaves one small file per request in
`<state dir>/health-requests/` (created 0700, each file 0600, written
atomically); the decider takes them at its next poll, before it polls, and
removes them. A request file is input like any other: one that does not fit
is removed and named in the decider's errors, never acted on.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path

from ray_accel.cluster import procs
from ray_accel.cluster import statedir as state
from ray_accel.cluster.record import HostRecord
from ray_accel.core.checks import CheckOutcome, CheckResult, NotSupported, short
from ray_accel.core.errors import InputError, RayAccelError
from ray_accel.core.files import UnreadableFile, read_bytes, write_atomic
from ray_accel.core.health_kept import KEPT_FILE, KeptDevice, cleared, doubted, dumps, read_kept
from ray_accel.core.health_state import MAX_TIME
from ray_accel.core.reader import CONTROL, Cursor, dump, load, parse_json

REQUESTS_DIR = "health-requests"
MAX_BYTES = 4096
MAX_ID = 256


@dataclass(frozen=True)
class ClearRequest:
    device_id: str
    at: float


def parse_request(raw: bytes, source: str) -> ClearRequest:
    """A request file's content, or `ReadError` naming `source` and the field."""
    obj = Cursor(parse_json(raw, f"request {source}", "{source} is not JSON: {error}"), f"request {source}")
    obj.only({"clear", "at"})
    return ClearRequest(obj.at("clear").text(MAX_ID, forbid=CONTROL[:32]), obj.at("at").number(0.0, MAX_TIME))


def ask_clear(state_dir: Path, device_id: str) -> ClearRequest:
    """Leave a clear request for the decider; the request."""
    folder = state_dir / REQUESTS_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    request = ClearRequest(device_id, time.time())
    text = json.dumps({"clear": request.device_id, "at": request.at})
    write_atomic(folder / f"clear-{time.time_ns()}-{secrets.token_hex(4)}.json", text)
    return request


@dataclass(frozen=True)
class Pending:
    """The clear requests waiting, oldest first; what could not be read (each
    named, its file already removed: it can never be acted on); and the files
    of those read, which `done` removes once what they asked is kept on disk."""

    requests: tuple[ClearRequest, ...]
    errors: tuple[str, ...]
    files: tuple[Path, ...]

    def done(self) -> None:
        """The requests are acted on and kept (`devices.json` written): they leave."""
        for path in self.files:
            path.unlink(missing_ok=True)


def pending_requests(state_dir: Path) -> Pending:
    """Every pending request. A request file stays until `Pending.done`: a
    decider killed before it kept what a request asked finds it again."""
    folder = state_dir / REQUESTS_DIR
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith("clear-") and n.endswith(".json"))
    except FileNotFoundError:
        return Pending((), (), ())
    except OSError as e:
        return Pending((), (f"requests folder {folder}: {e}",), ())
    found: list[ClearRequest] = []
    errors: list[str] = []
    files: list[Path] = []
    for name in names:
        path = folder / name
        try:
            found.append(parse_request(read_bytes(path, MAX_BYTES, follow=False), str(path)))
            files.append(path)
        except (UnreadableFile, OSError, InputError) as e:
            errors.append(str(e))
            path.unlink(missing_ok=True)
    return Pending(tuple(found), tuple(errors), tuple(files))


def clear_kept(place: state.Place, out: Collection[str], device_id: str) -> Path:
    """Where no decider runs: drop `device_id`'s sticky faults and doubt from
    the kept device health, under the host's lock (`out`: what the host's
    record has out of service, kept out where the file is unknown)."""
    with state.host_lock("health clear", place):
        record = state.load(place)
        if record is not None and record.decider is not None and procs.check(record.decider).ours:
            raise RayAccelError("the host's health decider started meanwhile: run `ray-accel health clear` again")
        now = time.time()
        kept = read_kept(place.directory)
        if not kept.unknown and device_id not in {d.device_id for d in kept.devices}:
            known = ", ".join(d.device_id for d in kept.devices[:20])
            raise InputError(f"device {device_id!r} is not one whose health is kept here (devices: {known})")
        devices = cleared(doubted(kept, out, now), device_id)
        return write_atomic(place.directory / KEPT_FILE, dumps(devices, now))


def tell_check(state_dir: Path, result: CheckResult) -> Path:
    """Leave a check made by hand for the decider to keep as the device's last."""
    folder = state_dir / REQUESTS_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    text = json.dumps({"check": dump(result)})
    return write_atomic(folder / f"check-{time.time_ns()}-{secrets.token_hex(4)}.json", text)


def parse_check(raw: bytes, source: str) -> CheckResult:
    """A check request's content, or `ReadError` naming `source` and the field."""
    obj = Cursor(parse_json(raw, f"request {source}", "{source} is not JSON: {error}"), f"request {source}")
    obj.only({"check"})
    return load(CheckResult, obj.at("check").data, f"request {source}: check")


def take_checks(state_dir: Path) -> tuple[list[CheckResult], list[str]]:
    """Every check made by hand and not yet kept, oldest first, each removed
    once read; and what could not be read (each named)."""
    folder = state_dir / REQUESTS_DIR
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith("check-") and n.endswith(".json"))
    except FileNotFoundError:
        return [], []
    except OSError as e:
        return [], [f"requests folder {folder}: {e}"]
    found: list[CheckResult] = []
    errors: list[str] = []
    for name in names:
        path = folder / name
        try:
            found.append(parse_check(read_bytes(path, MAX_BYTES, follow=False), str(path)))
        except (UnreadableFile, OSError, InputError) as e:
            errors.append(str(e))
        finally:
            path.unlink(missing_ok=True)
    return found, errors


def keep_check(place: state.Place, result: CheckResult) -> Path:
    """Where no decider runs: `result` as the device's last check in the kept
    device health, under the host's lock."""
    with state.host_lock("health check", place):
        record = state.load(place)
        if record is not None and record.decider is not None and procs.check(record.decider).ours:
            return tell_check(place.directory, result)
        now = time.time()
        kept = read_kept(place.directory)
        if kept.unknown and kept.found:  # never overwrite a file that cannot be read
            raise RayAccelError(f"the check of {result.device_id} is not kept: {kept.unknown}")
        devices = list(kept.devices)
        if result.device_id not in {d.device_id for d in devices}:
            devices.append(KeptDevice(device_id=result.device_id, since=now))
        kept_now = tuple(
            replace(d, check=result, checking=None) if d.device_id == result.device_id else d for d in devices
        )
        return write_atomic(place.directory / KEPT_FILE, dumps(kept_now, now))


def check_by_hand(record: HostRecord, device_id: str, timeout_s: float) -> CheckResult:
    """Run the backend's check of `device_id` here (the caller made sure no raylet
    serves it); a backend with no check is `unavailable`, saying so."""
    from ray_accel.plugins.discovery import load_plugin

    plugin = load_plugin(record.spec.backend)
    why = plugin.probe()
    started = time.time()
    if why is not None:
        return CheckResult(
            device_id, CheckOutcome.UNAVAILABLE, short(f"backend {record.spec.backend}: {why}"), started, started
        )
    found = plugin.check(device_id, timeout_s)
    if isinstance(found, NotSupported):
        why = f"backend {record.spec.backend} has no check: nothing was checked"
        return CheckResult(device_id, CheckOutcome.UNAVAILABLE, why, started, max(started, time.time()))
    return found
