"""Health sources: critical XID events and uncorrected ECC errors per GPU.

The telemetry's samples read them as a window (an XID in the last five
minutes, any uncorrected ECC error); the health rule (`health_rule`, run by
`health_monitor`) reads the same sources poll by poll and decides what is
fatal and what makes a GPU healthy again.

XID events are matched to a GPU by its UUID, asked of the handle the event
carries. The handle itself cannot be matched: nvidia-ml-py returns a new
ctypes pointer object for every handle it gives out (every
`nvmlDeviceGetHandleByIndex` call, every read of an event's `device` field),
and ctypes pointers compare by identity and cannot be hashed.

An NVML error while polling is never dropped: the first is logged, every one
is counted (`PollErrors`, shown in the backend's host attributes), and the
samples go on without the events that could not be read.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ray_accel_cuda.health_rule import DEFAULT_IGNORED_XIDS, Recovery
from ray_accel_cuda.nvml import INVALID_ARGUMENT, NA, NO_PERMISSION, NOT_SUPPORTED, Nvml, text

log = logging.getLogger(__name__)

# XIDs caused by the application, not the hardware (the Kubernetes device
# plugin's list): a crashing kernel must not mark the GPU unhealthy.
APPLICATION_XIDS: Final = DEFAULT_IGNORED_XIDS
XID_CRITICAL_EVENT: Final = 8  # nvmlEventTypeXidCriticalError
NVML_TIMEOUT: Final = 10  # NVML_ERROR_TIMEOUT: no event waiting
XID_WINDOW_S: Final = 300.0
MAX_EVENTS_PER_POLL: Final = 256  # never spin on a flood of events


def _code(err: BaseException) -> int | None:
    value = getattr(err, "value", None)
    return value if isinstance(value, int) else None


class PollErrors:
    """Errors met while polling NVML: the first logged, all counted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self.last: str | None = None

    def record(self, where: str, err: BaseException | str) -> None:
        message = f"{where}: {err if isinstance(err, str) else f'{type(err).__name__}: {err}'}"
        with self._lock:
            self.count += 1
            self.last = message
            first = self.count == 1
        if first:
            log.warning("NVML health poll error (%s); later ones are counted in nvml_poll_errors", message)
        else:
            log.debug("NVML health poll error #%d (%s)", self.count, message)

    def attributes(self) -> dict[str, str]:
        with self._lock:
            out = {"nvml_poll_errors": str(self.count)}
            if self.last is not None:
                out["nvml_poll_last_error"] = self.last
            return out


@dataclass(frozen=True)
class XidPoll:
    """The XID events one poll drained: (GPU UUID, XID) in arrival order, and
    whether the events could be read at all."""

    events: tuple[tuple[str, int], ...] = ()
    supported: bool = True
    error: str | None = None  # why waiting for events failed this poll
    unattributed: tuple[str, ...] = ()  # events whose GPU could not be told, each said


class XidMonitor:
    """Critical XIDs per device id: drained poll by poll, and kept over the
    last `window_s` seconds (those not in `ignored`) for the samples."""

    def __init__(
        self,
        nvml: Nvml,
        handles: Mapping[str, Any],
        clock: Callable[[], float],
        errors: PollErrors,
        window_s: float = XID_WINDOW_S,
        ignored: frozenset[int] = APPLICATION_XIDS,
    ) -> None:
        self.nvml = nvml
        self.handles = dict(handles)
        self.clock = clock
        self.errors = errors
        self.window_s = window_s
        self.ignored = ignored
        self.supported: bool | None = None  # None: not tried yet
        self._event_set: Any = None
        self._seen: list[tuple[float, str, int]] = []  # (when, device id, xid)

    def _register(self) -> None:
        q = self.nvml.query
        kind = getattr(self.nvml.module, "nvmlEventTypeXidCriticalError", XID_CRITICAL_EVENT)
        event_set = q("nvmlEventSetCreate")
        if event_set is NA:
            self.supported = False
            return
        self._event_set = event_set
        self.supported = True
        for device_id, h in self.handles.items():
            try:
                q("nvmlDeviceRegisterEvents", h, kind, event_set)
            except Exception as e:  # that GPU's events are missed: counted, and the others still register
                self.errors.record(f"registering XID events of {device_id}", e)

    def _device_of(self, event: Any) -> tuple[str | None, str]:
        """(the event's GPU, or None and why not)."""
        try:
            uuid = text(self.nvml.query("nvmlDeviceGetUUID", event.device))
        except Exception as e:
            self.errors.record("reading the UUID of an XID event's GPU", e)
            return None, f"its GPU's UUID cannot be read ({type(e).__name__}: {e})"
        if uuid is None or uuid not in self.handles:
            self.errors.record("XID event", f"GPU {uuid!r} is not one of this backend's devices")
            return None, f"GPU {uuid!r} is not one of this backend's devices"
        return uuid, ""

    def poll(self) -> XidPoll:
        """Drain waiting events (without blocking) into the window; what was drained."""
        try:
            if self.supported is None:
                self._register()
        except Exception as e:
            self.supported = None  # try again at the next poll
            self.errors.record("creating the XID event set", e)
            return XidPoll(error=f"creating the XID event set: {type(e).__name__}: {e}")
        if not self.supported:
            return XidPoll(supported=False)
        kind = getattr(self.nvml.module, "nvmlEventTypeXidCriticalError", XID_CRITICAL_EVENT)
        drained: list[tuple[str, int]] = []
        unattributed: list[str] = []
        for _ in range(MAX_EVENTS_PER_POLL):
            try:
                event = self.nvml.query("nvmlEventSetWait", self._event_set, 0)
            except Exception as e:
                if _code(e) != NVML_TIMEOUT:
                    self.errors.record("nvmlEventSetWait", e)
                    why = f"nvmlEventSetWait: {type(e).__name__}: {e}"
                    return XidPoll(tuple(drained), error=why, unattributed=tuple(unattributed))
                break
            if event is NA:  # waiting is unsupported by this driver or binding
                self.supported = False
                return XidPoll(tuple(drained), supported=False, unattributed=tuple(unattributed))
            if int(getattr(event, "eventType", kind)) != kind:
                continue
            xid = int(event.eventData)
            device_id, why = self._device_of(event)
            if device_id is None:
                unattributed.append(f"XID {xid} event: {why}")
                continue
            drained.append((device_id, xid))
            if xid not in self.ignored:
                self._seen.append((self.clock(), device_id, xid))
        return XidPoll(tuple(drained), unattributed=tuple(unattributed))

    def recent(self, device_id: str) -> tuple[int, ...]:
        now = self.clock()
        self._seen = [x for x in self._seen if now - x[0] < self.window_s]
        return tuple(sorted({xid for _, d, xid in self._seen if d == device_id}))


def ecc_uncorrected(nvml: Nvml, h: Any) -> int | None:
    """Uncorrected ECC errors since the driver loaded; None where unsupported."""
    m = nvml.module
    ecc = nvml.query(
        "nvmlDeviceGetTotalEccErrors",
        h,
        getattr(m, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
        getattr(m, "NVML_VOLATILE_ECC", 0),
    )
    return None if ecc is NA else int(ecc)


RECOVERY_FIELD = "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"
ACTION_PREFIX = "NVML_GPU_RECOVERY_ACTION_"
UNSIGNED_INT = 1  # NVML_VALUE_TYPE_UNSIGNED_INT (nvml.h)


class RecoveryUnreadable(Exception):
    """The driver answered the recovery action field with an error."""


def action_names(module: Any) -> dict[int, str]:
    """The binding's recovery actions by value, read by name: copies differ
    (5 is GPU_RESET_BUS in one, RECOVER_IMEX_DOMAIN in another)."""
    names: dict[int, str] = {}
    for attr in sorted(dir(module)):
        value = getattr(module, attr, None) if attr.startswith(ACTION_PREFIX) else None
        if isinstance(value, int):
            names.setdefault(value, attr.removeprefix(ACTION_PREFIX))
    return names


def recovery_action(nvml: Nvml, h: Any) -> Recovery | None:
    """The driver's recommended recovery action for the GPU; None where the
    binding lacks the field or its names, or the driver does not support it."""
    m = nvml.module
    field = getattr(m, RECOVERY_FIELD, None)
    names = action_names(m)
    if not isinstance(field, int) or "NONE" not in names.values():
        return None
    values = nvml.query("nvmlDeviceGetFieldValues", h, [field])
    if values is NA:
        return None
    got = values[0]
    # A driver that does not know the field answers INVALID_ARGUMENT for it
    # (as an H100 on driver 580.159.04 answers an unknown field id).
    if got.nvmlReturn in (INVALID_ARGUMENT, NOT_SUPPORTED, NO_PERMISSION):
        return None
    if got.nvmlReturn != 0:
        raise RecoveryUnreadable(f"{RECOVERY_FIELD}: NVML error {got.nvmlReturn}")
    if got.valueType != getattr(m, "NVML_VALUE_TYPE_UNSIGNED_INT", UNSIGNED_INT):
        raise RecoveryUnreadable(f"{RECOVERY_FIELD}: value type {got.valueType}, not an unsigned int")
    value = int(got.value.uiVal)
    return Recovery(value, names.get(value))
