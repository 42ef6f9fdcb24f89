"""The mock's device health, fed from its fault file (RAYACCEL_MOCK_FAULTS,
re-read on every poll).

A minimal monitor written against the health contract so the decider can be
built and tested: an injected event is seen once per (device, kind, code,
seq); its `fatal` decides, or, where null, the rule of the family the mock
impersonates (GPU: NVIDIA's default list of application XIDs that do not make
a GPU unhealthy, 13, 31, 43, 45, 68 and 109, from NVIDIA/k8s-device-plugin
`internal/rm/health.go`; every other event is fatal). A fatal event is
sticky until `clear`; a lost device is unhealthy until present for
`RETURN_POLLS` polls in a row. `"fail": true` reads every device as unknown
(a sticky unhealthy state stays).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping

from ray_accel.core.devices import Device
from ray_accel.core.health import DeviceHealth, Health, HealthEvent, HealthReport
from ray_accel.plugins.interface import HealthMonitor

RETURN_POLLS = 3
GPU_NON_FATAL_XIDS = frozenset({"13", "31", "43", "45", "68", "109"})
_EVENT_KEYS = {"device", "kind", "code", "fatal", "seq", "count"}


def read_faults(path: str | None) -> Mapping[str, object]:
    """The fault file's object ({} when none is set or it cannot be read yet:
    a test may be writing it)."""
    if not path:
        return {}
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class MockHealthMonitor(HealthMonitor):
    def __init__(self, devices: tuple[Device, ...], family: str, faults_path: str | None) -> None:
        self._devices = devices
        self._gpu = family != "neuron"
        self._path = faults_path
        self._seen: set[tuple[str, str, str, str]] = set()
        self._state: dict[str, DeviceHealth] = {}
        self._present: dict[str, int] = {}

    def _fatal(self, kind: str, code: str | None, given: object) -> bool:
        if isinstance(given, bool):
            return given
        if kind == "xid" and self._gpu:
            return code not in GPU_NON_FATAL_XIDS
        return True

    def poll(self) -> HealthReport:
        now = time.time()
        faults = read_faults(self._path or os.environ.get("RAYACCEL_MOCK_FAULTS"))
        lost_raw = faults.get("lost", [])
        lost = {str(x) for x in lost_raw} if isinstance(lost_raw, list) else set()
        failing = faults.get("fail") is True
        events: list[HealthEvent] = []
        raw_events = faults.get("events", [])
        for raw in raw_events if isinstance(raw_events, list) else []:
            if not isinstance(raw, dict) or set(raw) - _EVENT_KEYS:
                continue
            device, kind = str(raw.get("device")), str(raw.get("kind"))
            code = None if raw.get("code") is None else str(raw.get("code"))
            key = (device, kind, code or "", str(raw.get("seq", "")))
            if key in self._seen or device not in {d.id for d in self._devices}:
                continue
            self._seen.add(key)
            reason = f"{kind.upper()} {code}" if code else kind
            events.append(
                HealthEvent(device, kind, code, f"{reason} (injected)", now, self._fatal(kind, code, raw.get("fatal")))
            )
        out = []
        for d in self._devices:
            prev = self._state.get(d.id)
            mine = [e for e in events if e.device_id == d.id]
            fatal = next((e for e in reversed(mine) if e.fatal), None)
            if d.id in lost:
                self._present[d.id] = 0
                if prev is None or prev.state is not Health.UNHEALTHY or prev.last_event is None:
                    lost_event = HealthEvent(d.id, "lost", None, "device lost (injected)", now, True)
                    events.append(lost_event)
                    prev = DeviceHealth(d.id, Health.UNHEALTHY, now, lost_event, f"present for {RETURN_POLLS} polls")
                out.append(prev)
                continue
            if fatal is not None:
                again = f"cleared by hand: ray-accel health clear {d.id}"
                cur = DeviceHealth(d.id, Health.UNHEALTHY, now, fatal, again)
            elif prev is not None and prev.state is Health.UNHEALTHY:
                cur = prev
                if prev.last_event is not None and prev.last_event.kind == "lost":
                    self._present[d.id] = self._present.get(d.id, 0) + 1
                    if self._present[d.id] >= RETURN_POLLS:
                        back = HealthEvent(d.id, "returned", None, "device present again", now, False)
                        events.append(back)
                        cur = DeviceHealth(d.id, Health.HEALTHY, now, back, "")
            elif failing:
                cur = DeviceHealth(
                    d.id,
                    Health.UNKNOWN,
                    now if prev is None or prev.state is not Health.UNKNOWN else prev.since,
                    prev.last_event if prev else None,
                    "a readable health source",
                )
            else:
                last = mine[-1] if mine else (prev.last_event if prev else None)
                since = prev.since if prev is not None and prev.state is Health.HEALTHY else now
                cur = DeviceHealth(d.id, Health.HEALTHY, since, last, "")
            self._state[d.id] = cur
            out.append(cur)
        for d in out:
            self._state[d.device_id] = d
        errors = ("mock health source failed (injected)",) if failing else ()
        return HealthReport(now, tuple(out), tuple(events), errors)

    def clear(self, device_id: str) -> None:
        prev = self._state.get(device_id)
        if prev is not None and prev.state is Health.UNHEALTHY:
            now = time.time()
            event = HealthEvent(device_id, "cleared", None, "cleared by hand", now, False)
            self._state[device_id] = DeviceHealth(device_id, Health.HEALTHY, now, event, "")
