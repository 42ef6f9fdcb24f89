"""The CUDA health rule, pure: what NVML said in one poll -> each GPU's verdict.

What is fatal, and what makes a GPU healthy again:

- **XID** (`nvmlEventTypeXidCriticalError`). Every XID is fatal except the
  ones caused by the application rather than the hardware, which NVIDIA's
  Kubernetes device plugin ignores by default: 13, 31, 43, 45, 68, 109
  (NVIDIA/k8s-device-plugin `internal/rm/health.go`, `ignoredXids`; the
  same list in kubernetes-sigs/dra-driver-nvidia-gpu
  `cmd/gpu-kubelet-plugin/device_health.go`, `xidsToSkip`, which taints
  them with effect None: informational). The list is configurable
  (`RAYACCEL_CUDA_IGNORED_XIDS`). An ignored XID only counts (an event with
  fatal=false). A fatal XID is **sticky until cleared by hand**: no NVML
  signal says a GPU recovered, and NVIDIA's own stacks never recover
  either (the device plugin's `internal/plugin/server.go`: "FIXME: there
  is no way to recover from the Unhealthy state"; the DRA driver's taints
  stay until its kubelet plugin restarts).
- **Uncorrected ECC errors** (`nvmlDeviceGetTotalEccErrors` with
  NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC: the count since
  the driver loaded). The first reading is a baseline, never an event (a
  monitor restarted after a person cleared the GPU must not fault it
  again); growth is fatal and sticky until cleared by hand, like an XID. A
  count that falls (the driver reloaded, the GPU was reset) is a new
  baseline.
- **GPU lost**: NVML answers NVML_ERROR_GPU_IS_LOST for it, or no longer
  finds it by its UUID (`nvmlDeviceGetHandleByUUID`: NVML_ERROR_NOT_FOUND;
  the DRA driver taints such a GPU `gpu-lost`). Fatal; healthy again once
  it is present for K polls in a row (`RAYACCEL_HEALTH_RECOVERY_POLLS`,
  default 3).

- **Recovery action**, where the installed binding names the NVML field
  NVML_FI_DEV_GET_GPU_RECOVERY_ACTION and its actions and the driver reads
  it for the GPU: the driver's own word decides, not the XID list. Every
  action but NONE and RECOVER_IMEX_DOMAIN (scoped to the IMEX domain, not
  the GPU) is fatal, and so is a value the binding does not name; the fault
  lasts while the driver asks for the action and ends after K polls of
  NONE (the driver clears it once the GPU was reset or the node rebooted).
  XIDs of such a GPU only count. Where the binding lacks the field or its
  names, or the driver does not know or support it, the XID list above
  decides (the device's `source` says which: "recovery-action" or "xid").
  The sources are in docs/gpu-health.md.

A poll that cannot read a source (an NVML error other than the ones above)
leaves the GPU UNKNOWN unless a fault holds, and counts toward nothing. A
GPU none of whose health sources works (XID events unsupported, ECC
unsupported) is UNKNOWN: presence alone says nothing of its health.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from ray_accel.core import health_kept, health_track
from ray_accel.core.errors import InputError
from ray_accel.core.health import HealthEvent, HealthReport, one_line
from ray_accel.core.health_kept import KeptDevice
from ray_accel.core.health_track import Findings, Level, Tracked
from ray_accel.plugins.rule_monitor import Rule

IGNORED_XIDS_ENV = "RAYACCEL_CUDA_IGNORED_XIDS"
# NVIDIA/k8s-device-plugin internal/rm/health.go `ignoredXids`: application errors, "the GPU should still be healthy".
DEFAULT_IGNORED_XIDS: Final = frozenset({13, 31, 43, 45, 68, 109})
MAX_XID = (1 << 64) - 1  # nvmlEventData_t.eventData is an unsigned long long
MAX_XIDS_CHARS = 4096
ECC_CODE = "volatile_uncorrected"
RECOVERY = "recovery-action"  # the kind of its fault, and the source that decided
XID = "xid"
BY_ACTION = ": counted (the driver's recovery action decides)"
# NVIDIA's DRA driver (device_health.go, IsEventNonFatal) schedules on a GPU
# whose recovery action is one of these; every other action taints it NoSchedule.
NOT_FATAL_ACTIONS: Final = frozenset({"NONE", "RECOVER_IMEX_DOMAIN"})

# Names from NVIDIA's XID catalogue (docs.nvidia.com/deploy/xid-errors); the
# six ignored ones as the device plugin's comments name them. An XID not
# listed keeps working, shown by its number alone.
XID_NAMES: Final = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    68: "Video processor exception",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context Switch Timeout Error",
}


def parse_ignored_xids(text: str, what: str = IGNORED_XIDS_ENV) -> frozenset[int]:
    """'13,31,43' -> those XIDs; '' -> none (every XID fatal). Decimal
    numbers separated by commas, each once; anything else is an
    `InputError` naming the entry."""
    if len(text) > MAX_XIDS_CHARS:
        raise InputError(f"{what}: {len(text)} characters, more than {MAX_XIDS_CHARS}")
    if text == "":
        return frozenset()
    out: set[int] = set()
    for token in text.split(","):
        if not token or not token.isascii() or not token.isdigit():
            raise InputError(f"{what}={text!r}: {token!r} is not an XID (a decimal number)")
        if len(token) > 1 and token.startswith("0"):
            raise InputError(f"{what}={text!r}: {token!r} has a leading zero")
        xid = int(token)
        if xid > MAX_XID:
            raise InputError(f"{what}={text!r}: {token} is past the largest XID NVML can report ({MAX_XID})")
        if xid in out:
            raise InputError(f"{what}={text!r}: XID {xid} is listed twice")
        out.add(xid)
    return frozenset(out)


def ignored_xids(environ: Mapping[str, str]) -> frozenset[int]:
    """The XIDs that only count: `RAYACCEL_CUDA_IGNORED_XIDS` replaces NVIDIA's default list."""
    raw = environ.get(IGNORED_XIDS_ENV)
    return DEFAULT_IGNORED_XIDS if raw is None else parse_ignored_xids(raw)


def xid_reason(xid: int, fatal: bool) -> str:
    name = XID_NAMES.get(xid)
    text = f"XID {xid}" + (f" ({name})" if name else "")
    return text if fatal else f"{text}: not fatal, counted"


@dataclass(frozen=True)
class CudaSettings:
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS
    recovery_polls: int = health_track.DEFAULT_RECOVERY_POLLS

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> CudaSettings:
        """The user's settings; a bad value is an `InputError` naming the variable."""
        return cls(ignored_xids(environ), health_track.recovery_polls(environ))


@dataclass(frozen=True)
class Xid:
    """One XID event on one of this backend's GPUs."""

    device_id: str
    xid: int
    fatal: bool | None = None  # None: the rule decides (the ignored list); a bool overrides it


@dataclass(frozen=True)
class Recovery:
    """The driver's recommended recovery action for one GPU."""

    value: int
    name: str | None  # the installed binding's name for it, less its prefix ("DRAIN_AND_RESET"); None: unnamed

    def fatal(self) -> bool:
        return self.name not in NOT_FATAL_ACTIONS

    def reason(self) -> str:
        if self.name is None:
            return f"NVML recovery action {self.value}: not one the installed NVML binding names, taken as fatal"
        return f"NVML recovery action {self.name}"


@dataclass(frozen=True, kw_only=True)
class GpuReading:
    """What NVML said about one GPU in one poll."""

    device_id: str
    present: bool | None  # None: could not tell (an NVML error)
    absent_why: str | None = None  # "GPU is lost", "not found by its UUID"
    presence_error: str | None = None
    ecc: int | None = None  # uncorrected volatile count; None: not read
    ecc_error: str | None = None  # the read failed this poll (None with ecc None: unsupported)
    recovery: Recovery | None = None  # None: not read (the XID list decides)
    recovery_error: str | None = None  # the read failed this poll


XidSource = Literal["read", "unsupported", "failed"]


@dataclass(frozen=True)
class CudaObservation:
    """What the CUDA health sources said in one poll."""

    gpus: tuple[GpuReading, ...]
    xids: tuple[Xid, ...] = ()
    xid_source: XidSource = "read"
    xid_error: str | None = None  # why the events could not be read (xid_source "failed")
    errors: tuple[str, ...] = ()  # other problems of this poll (an event naming no GPU of ours)
    other: tuple[Findings, ...] = ()  # findings from outside NVML (the mock's spec), merged per device


@dataclass(frozen=True)
class CudaState:
    settings: CudaSettings
    tracked: tuple[Tracked, ...]
    ecc: Mapping[str, int] = field(default_factory=dict)  # last count per GPU: the baseline for growth

    def device_ids(self) -> tuple[str, ...]:
        return tuple(t.device_id for t in self.tracked)


def initial(device_ids: tuple[str, ...], settings: CudaSettings, now: float) -> CudaState:
    return CudaState(settings, health_track.start(device_ids, now))


def _findings(gpu: GpuReading, xids: tuple[Xid, ...], obs: CudaObservation, prev: CudaState, now: float) -> Findings:
    d = gpu.device_id
    vouched: list[str] = []
    unread: list[str] = []
    events: list[HealthEvent] = []
    levels: list[Level] = []
    if obs.xid_source == "read":
        vouched.append("xid")
    elif obs.xid_source == "failed":
        unread.append(f"XID events: {obs.xid_error or 'unreadable'}")
    by_list = gpu.recovery is None
    for x in xids:
        fatal = (by_list and x.xid not in prev.settings.ignored_xids) if x.fatal is None else x.fatal
        reason = xid_reason(x.xid, fatal) if by_list or x.fatal is not None else xid_reason(x.xid, True) + BY_ACTION
        events.append(HealthEvent(d, "xid", str(x.xid), reason, now, fatal))
    if gpu.recovery_error is not None:
        unread.append(f"recovery action: {gpu.recovery_error}")
    if gpu.recovery is not None:
        vouched.append(RECOVERY)
        r = gpu.recovery
        bad = HealthEvent(d, RECOVERY, r.name or str(r.value), r.reason(), now, True) if r.fatal() else None
        levels.append(Level(RECOVERY, bad, "recovery action NONE"))
    if gpu.present is None:
        unread.append(f"presence: {gpu.presence_error or 'unknown'}")
    elif not gpu.present:
        lost = HealthEvent(d, "lost", None, one_line(f"GPU lost ({gpu.absent_why or 'absent'})"), now, True)
        levels.append(Level("lost", lost, "present"))
    else:
        levels.append(Level("lost", None, "present"))
        if gpu.ecc_error is not None:
            unread.append(f"ECC: {gpu.ecc_error}")
        elif gpu.ecc is not None:
            vouched.append("ecc")
            before = prev.ecc.get(d)
            if before is not None and gpu.ecc > before:
                reason = f"uncorrected ECC errors grew from {before} to {gpu.ecc} (volatile count)"
                events.append(HealthEvent(d, "ecc", ECC_CODE, reason, now, True))
    return Findings(d, tuple(vouched), tuple(unread), tuple(events), tuple(levels))


def step(previous: CudaState, obs: CudaObservation, now: float) -> tuple[CudaState, HealthReport]:
    """The next state and this poll's report."""
    known = set(previous.device_ids())
    errors = list(obs.errors)
    by_gpu: dict[str, list[Xid]] = {}
    for x in obs.xids:
        if x.device_id in known:
            by_gpu.setdefault(x.device_id, []).append(x)
        else:
            errors.append(f"XID {x.xid} names {x.device_id!r}, not one of this backend's GPUs")
    readings = {g.device_id: g for g in obs.gpus}
    findings: dict[str, Findings] = {}
    for d in previous.device_ids():
        gpu = readings.get(d, GpuReading(device_id=d, present=None, presence_error="not read this poll"))
        findings[d] = _findings(gpu, tuple(by_gpu.get(d, ())), obs, previous, now)
    for f in obs.other:
        if f.device_id in findings:
            findings[f.device_id] = findings[f.device_id].merged(f)
    ecc = dict(previous.ecc)
    for g in obs.gpus:
        if g.present and g.ecc_error is None and g.ecc is not None and g.device_id in known:
            ecc[g.device_id] = g.ecc
    tracked, report = health_track.step_all(previous.tracked, findings, errors, now, previous.settings.recovery_polls)
    by_action = {g.device_id for g in obs.gpus if g.recovery is not None}
    devices = tuple(replace(v, source=RECOVERY if v.device_id in by_action else XID) for v in report.devices)
    return CudaState(previous.settings, tracked, ecc), replace(report, devices=devices)


def clear(previous: CudaState, device_id: str) -> CudaState:
    return CudaState(previous.settings, health_track.clear_device(previous.tracked, device_id), previous.ecc)


def kept(state: CudaState) -> tuple[KeptDevice, ...]:
    """What of `state` outlives the decider: each GPU's faults and ECC baseline."""
    ecc = state.ecc
    return tuple(health_kept.keep(t, {ECC_CODE: ecc[t.device_id]} if t.device_id in ecc else {}) for t in state.tracked)


def resumed(state: CudaState, kept: Sequence[KeptDevice]) -> CudaState:
    ecc = {d: n for (d, name), n in health_kept.baselines(kept, state.device_ids()).items() if name == ECC_CODE}
    return CudaState(state.settings, health_kept.resume(state.tracked, kept), {**state.ecc, **ecc})


RULE: Final = Rule(step, clear, kept, resumed)
