"""The mock's fault file: faults injected into a running mock host.

`RAYACCEL_MOCK_FAULTS` names a JSON file, read again on every sample and
every health poll (an absent or empty file: no faults; an empty one is what
a reader can see while a test rewrites the file in place). It is test input, and input
all the same: it is checked strictly, and anything that does not fit is a
`FaultFileError` naming the field and the value (samples then fail with it;
a health poll reports it as its error, every device UNKNOWN).

```json
{"lost": ["neuron:3"],
 "fail": true,
 "counters": {"neuron:9": {"mem_ecc_uncorrected": 2}},
 "events": [
   {"device": "neuron:3", "kind": "ecc", "code": "mem_ecc_uncorrected", "count": 2, "seq": 1},
   {"device": "neuron:7", "kind": "components", "code": "hbm,sram"},
   {"device": "GPU-...", "kind": "xid", "code": 79, "fatal": null, "seq": 1},
   {"device": "GPU-...", "kind": "recovery", "code": "DRAIN_AND_RESET"}
 ]}
```

Top level (every key optional; no other key):

- `lost`: device ids (of this mock host, each once) that are gone: absent
  from the samples, and gone for the health rule (fatal; present again for
  K polls once removed from the list).
- `fail`: true makes every source fail: samples raise, health polls read
  nothing (every device UNKNOWN; states that only a person or K clean polls
  end are kept).
- `counters`: per device, error counters' current values (absolute, read
  on every poll like `components`; the names an `ecc` entry's `code` takes).
  A counter reads its value here (0 when not listed) plus what this
  monitor's `ecc` entries grew it by, so a monitor started while the file
  holds a grown counter reads it grown from its first poll on, as a
  restarted monitor does on the hardware.
- `events`: what the family's health sources would report, fed to the same
  rule as the real backend's (GPU presets: the CUDA rule; Neuron presets:
  the Neuron rule). Each entry:
  - `device` (required): a device id of this host.
  - `kind` (required), by the family impersonated:
    - GPU presets: `xid` (`code`: the XID, an integer >= 0), `ecc`
      (`code`: `volatile_uncorrected`, the one NVML counter the rule reads)
      and `recovery` (`code`: the driver's recommended recovery action by
      its name in NVML's `nvmlDeviceGpuRecoveryAction_t`, less the
      `NVML_GPU_RECOVERY_ACTION_` prefix: `NONE`, `GPU_RESET`,
      `NODE_REBOOT`, `DRAIN_P2P`, `DRAIN_AND_RESET`,
      `RECOVER_IMEX_DOMAIN`, `BUS_RESET` (or `GPU_RESET_BUS`, the name of
      5 in the copy of the binding Ray bundles) or `SYSTEM_REBOOT`; NVIDIA,
      "Error Recovery and Response Flags",
      https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html,
      and docs/gpu-health.md for the names);
    - Neuron presets: `ecc` (`code`: `sram_ecc_uncorrected`,
      `mem_ecc_uncorrected` or `mem_ecc_repairable_uncorrected`) and
      `components` (`code`: what the driver prints in
      `health_status/unhealthy_components`: a comma list such as
      `hbm,link_efa`, or `device_unreachable`).
  - `code` (required), as above.
  - `seq` (integer >= 0, default 0): `xid` and `ecc` entries are events,
    each taken ONCE per (device, kind, code, seq) by a monitor; a new seq
    repeats one.
  - `count` (`ecc` only; integer >= 1, default 1): how much the counter
    grows when the entry is taken. A mock device's counters read 0 when
    its monitor starts (the baseline), so the first entry is growth.
  - `fatal` (`xid` only; true, false or null, default null): null lets
    the rule decide (NVIDIA's ignored XIDs only count); a bool overrides
    the rule for that event, as the ignored list may be set per host. The
    other kinds' rules allow no override (ECC growth, unhealthy components
    and a gone device are always fatal), so `fatal` on them is an error.
  - `recovery` entries are not events but the GPU's current reading of
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, one per GPU: a GPU with an entry
    reads that action (its driver and binding have the field), one without
    reads none (an older driver: the XID list decides).
  - `components` entries are not events but the node's current reading:
    the device reads those components as unhealthy while the entry is in
    the file (several entries: all of their components), and reads empty
    once it is removed (healthy again after K polls).
- `checks`: the outcome of the active check of a device (`MockPlugin.check`),
  `{DEVICE: OUTCOME}` or `{DEVICE: {"outcome": OUTCOME, "delay_s": SECONDS,
  "detail": TEXT}}` (`delay_s` and `detail` optional), OUTCOME one of
  `passed`, `failed`, `timeout`, `busy`, `unavailable`. A device not listed
  passes. `delay_s` (0 to 3600, default 0) is how long the check takes, so
  its time limit can cut it (outcome `timeout`, whatever is listed); the
  file is read when the check starts.
- `repairs` (GPU presets only): the outcome of a reset of a device
  (`MockPlugin.repair`), `{DEVICE: "ok" | "failed"}`; a device not listed
  resets `ok`. Each reset made is appended to `repairs.jsonl` beside the
  fault file (`{"device", "time", "action", "outcome"}` per line), and, as
  the driver clears the action once the GPU was reset, a `recovery` entry
  whose reset (GPU_RESET, DRAIN_AND_RESET) `repairs.jsonl` records as `ok`
  reads NONE from then on (remove the line, or the file, to make the GPU
  ask again). A Neuron preset has no reset to make (AWS publishes none for
  one device: the repair is the operator's), so `repairs` there is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ray_accel_cuda import health_rule as cuda_rule
from ray_accel_cuda.repair import RESET_ACTIONS
from ray_accel_cuda.runtime import FAMILY as GPU_FAMILY
from ray_accel_neuron import limits as neuron_limits
from ray_accel_neuron import sysfs as neuron_sysfs
from ray_accel_neuron.runtime import FAMILY as NEURON_FAMILY

from ray_accel.core.checks import CheckOutcome, RepairOutcome
from ray_accel.core.errors import InputError
from ray_accel.core.reader import Cursor, ReadError, parse_json, read_file, show

FAULTS_ENV = "RAYACCEL_MOCK_FAULTS"
REPAIRS_FILE = "repairs.jsonl"  # beside the fault file: one JSON line per reset the mock made
REPAIR_KEYS = ("device", "time", "action", "outcome")
MAX_BYTES = 1024 * 1024
MAX_COUNT = (1 << 32) - 1  # the driver's counters are "%u"
TOP_KEYS = ("lost", "fail", "counters", "events", "checks", "repairs")
EVENT_KEYS = ("device", "kind", "code", "seq", "count", "fatal")
CHECK_KEYS = ("outcome", "delay_s", "detail")
MAX_DELAY_S = 3600.0
MAX_DETAIL = 400
# Every action a binding names, with its value there: NONE to DRAIN_AND_RESET
# (0 to 4) in every copy; 5 is RECOVER_IMEX_DOMAIN in nvidia-ml-py 13.615.71
# and GPU_RESET_BUS in the copy Ray 2.60 bundles, which stops there; 6 and 7
# as nvidia-ml-py names them (docs/gpu-health.md). The rule reads the name.
RECOVERY_VALUES = {
    "NONE": 0,
    "GPU_RESET": 1,
    "NODE_REBOOT": 2,
    "DRAIN_P2P": 3,
    "DRAIN_AND_RESET": 4,
    "RECOVER_IMEX_DOMAIN": 5,
    "GPU_RESET_BUS": 5,
    "BUS_RESET": 6,
    "SYSTEM_REBOOT": 7,
}
RECOVERY_ACTIONS = tuple(RECOVERY_VALUES)
CHECK_OUTCOMES = tuple(o.value for o in CheckOutcome)
REPAIR_OUTCOMES = (RepairOutcome.OK.value, RepairOutcome.FAILED.value)
# Readings, not events: taken on every poll while listed.
CURRENT_KINDS = ("components", "recovery")
# Per family impersonated: its kinds, and each kind's codes (None: checked by the kind's own parser).
KINDS: dict[str, dict[str, tuple[str, ...] | None]] = {
    GPU_FAMILY: {"xid": None, "ecc": (cuda_rule.ECC_CODE,), "recovery": RECOVERY_ACTIONS},
    NEURON_FAMILY: {"ecc": neuron_sysfs.ECC_FILES, "components": None},
}


class FaultFileError(InputError):
    """The fault file does not fit its schema; the message names the field and value."""


@dataclass(frozen=True)
class FaultEvent:
    device: str
    kind: str
    code: str  # an XID as its decimal text; a counter's name; the components as the driver prints them
    seq: int = 0
    count: int = 1
    fatal: bool | None = None

    @property
    def key(self) -> tuple[str, str, str, int]:
        """What makes an event new to a monitor."""
        return (self.device, self.kind, self.code, self.seq)


@dataclass(frozen=True)
class CheckSpec:
    """What the mock's active check of one device does."""

    outcome: CheckOutcome = CheckOutcome.PASSED
    delay_s: float = 0.0
    detail: str = ""  # "": the mock says where the outcome came from


@dataclass(frozen=True, kw_only=True)
class Faults:
    lost: frozenset[str] = frozenset()
    fail: bool = False
    events: tuple[FaultEvent, ...] = ()
    counters: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (device, counter) -> value
    checks: Mapping[str, CheckSpec] = field(default_factory=dict)  # a device not listed passes
    repairs: Mapping[str, RepairOutcome] = field(default_factory=dict)  # a device not listed resets ok
    resets: frozenset[tuple[str, str]] = frozenset()  # (device, action) reset ok, from repairs.jsonl

    def recovery_of(self, device_id: str) -> str | None:
        """The GPU's recovery action now: its `recovery` entry's, NONE once
        that action's reset was made (the driver clears it); None: no entry."""
        codes = [e.code for e in self.events if e.kind == "recovery" and e.device == device_id]
        if not codes:
            return None
        if codes[0] in RESET_ACTIONS and (device_id, codes[0]) in self.resets:
            return "NONE"
        return codes[0]

    def check_of(self, device_id: str) -> CheckSpec:
        return self.checks.get(device_id, CheckSpec())

    def repair_of(self, device_id: str) -> RepairOutcome:
        return self.repairs.get(device_id, RepairOutcome.OK)


def _device(node: Cursor, devices: Collection[str]) -> str:
    device = node.text(message="{value} is not a device id")
    if device not in devices:
        node.fail(f"{show(device)} is not a device of this mock host")
    return device


def _code(kind: str, node: Cursor, family: str) -> str:
    allowed = KINDS[family][kind]
    if kind == "xid":
        return str(node.int(0, cuda_rule.MAX_XID))
    if allowed is not None:
        return node.one_of(allowed, f"{{value}} is not one of {', '.join(allowed)} for kind {show(kind)}")
    value = node.text(MAX_BYTES, forbid="")
    if value != value.strip():
        node.fail(f"{show(value)} has spaces around it")
    try:
        neuron_sysfs.parse_unhealthy_components(value, node.path)
    except neuron_limits.BadData as e:
        raise ReadError(str(e)) from None
    return value


def _event(obj: Cursor, devices: Collection[str], family: str) -> FaultEvent:
    obj.only(EVENT_KEYS)
    kinds = KINDS[family]
    kind = obj.at("kind").one_of(kinds, f"{{value}} is not one of {', '.join(kinds)} (a {family} mock host)")
    fatal = obj.at("fatal", None).optional()
    if fatal is not None:
        fatal.bool("{value} is not true, false or null")
        if kind != "xid":
            fatal.fail(f"{show(fatal.data)}: only an xid's rule can be overridden ({kind} is always fatal)")
    if "count" in obj.mapping() and kind != "ecc":
        obj.at("count").fail(f"only ecc events have a count ({show(kind)} has none)")
    return FaultEvent(
        device=_device(obj.at("device"), devices),
        kind=kind,
        code=_code(kind, obj.at("code"), family),
        seq=obj.at("seq", 0).int(0, MAX_COUNT),
        count=obj.at("count", 1).int(1, MAX_COUNT),
        fatal=None if fatal is None else fatal.bool(),
    )


def _counters(obj: Cursor, devices: Collection[str], family: str) -> dict[tuple[str, str], int]:
    names = KINDS[family]["ecc"] or ()
    out = {}
    for device, node in obj.items():
        _device(Cursor(device, node.path), devices)
        for name, value in node.items():
            if name not in names:
                value.fail(f"{show(name)} is not one of {', '.join(names)}")
            out[(device, name)] = value.int(0, MAX_COUNT)
    return out


def _check(node: Cursor) -> CheckSpec:
    choices = ", ".join(CHECK_OUTCOMES)
    if isinstance(node.data, str):
        return CheckSpec(CheckOutcome(node.one_of(CHECK_OUTCOMES, f"{{value}} is not one of {choices}")))
    if not isinstance(node.data, dict):
        node.fail(f"{show(node.data)} is neither one of {choices} nor an object with {', '.join(CHECK_KEYS)}")
    obj = node.only(CHECK_KEYS, f"unknown key {{value}} (a check takes {', '.join(CHECK_KEYS)})")
    outcome = obj.at("outcome").one_of(CHECK_OUTCOMES, f"{{value}} is not one of {choices}")
    return CheckSpec(
        CheckOutcome(outcome),
        obj.at("delay_s", 0.0).number(0.0, MAX_DELAY_S),
        obj.at("detail", "").text(MAX_DETAIL, empty=True, printable=True),
    )


def _checks(obj: Cursor, devices: Collection[str]) -> dict[str, CheckSpec]:
    out = {}
    for device, node in obj.items():
        _device(Cursor(device, node.path), devices)
        out[device] = _check(node)
    return out


def _repairs(obj: Cursor, devices: Collection[str], family: str) -> dict[str, RepairOutcome]:
    if obj.mapping() and family != GPU_FAMILY:
        obj.fail(f"a {family} mock host has no reset to make (AWS publishes none for one device)")
    out = {}
    for device, node in obj.items():
        _device(Cursor(device, node.path), devices)
        outcome = node.one_of(REPAIR_OUTCOMES, f"{{value}} is not one of {', '.join(REPAIR_OUTCOMES)}")
        out[device] = RepairOutcome(outcome)
    return out


def parse_faults(text: str, devices: Collection[str], family: str, where: str = "fault file") -> Faults:
    """The fault file's text, checked against this host's devices and the
    family it impersonates; a `FaultFileError` naming what does not fit."""
    if family not in KINDS:
        raise FaultFileError(f"{where}: no fault kinds for family {family!r}")
    if not text.strip():
        return Faults()
    try:
        obj = Cursor(parse_json(text, where, "{source}: not JSON ({error})")).only(TOP_KEYS)
        lost = [_device(x, devices) for x in obj.at("lost", []).list()]
        for i, x in enumerate(lost):
            if x in lost[:i]:
                raise ReadError(f"{x!r} is listed twice", f"lost[{i}]")
        fail = obj.at("fail", False).bool()
        events = tuple(_event(x, devices, family) for x in obj.at("events", []).list())
        counters = _counters(obj.at("counters", {}), devices, family)
        checks = _checks(obj.at("checks", {}), devices)
        repairs = _repairs(obj.at("repairs", {}), devices, family)
    except ReadError as e:
        raise FaultFileError(str(e) if str(e).startswith(where) else f"{where}: {e}") from None
    seen: set[tuple[str, str, str, int]] = set()
    for i, ev in enumerate(events):
        if ev.kind == "recovery" and any(e.kind == "recovery" and e.device == ev.device for e in events[:i]):
            raise FaultFileError(f"{where}: events[{i}]: {ev.device} has a recovery action already")
        if ev.kind not in CURRENT_KINDS and ev.key in seen:
            raise FaultFileError(
                f"{where}: events[{i}]: ({ev.device}, {ev.kind}, {ev.code}, seq {ev.seq}) is listed twice; "
                "give a repeat its own seq"
            )
        seen.add(ev.key)
    return Faults(lost=frozenset(lost), fail=fail, events=events, counters=counters, checks=checks, repairs=repairs)


def parse_resets(text: str, devices: Collection[str], where: str = REPAIRS_FILE) -> frozenset[tuple[str, str]]:
    """The (device, action) pairs `repairs.jsonl` records as reset `ok`; a
    `FaultFileError` naming the line and field that does not fit."""
    done = set()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = Cursor(parse_json(line, REPAIRS_FILE, "not JSON ({error})")).only(REPAIR_KEYS)
            device = _device(obj.at("device"), devices)
            obj.at("time").number(0)
            action = obj.at("action").one_of(RECOVERY_ACTIONS)
            outcome = obj.at("outcome").one_of(REPAIR_OUTCOMES)
        except ReadError as e:
            raise FaultFileError(f"{where}: line {number}: {e}") from None
        if outcome == RepairOutcome.OK.value:
            done.add((device, action))
    return frozenset(done)


def load_faults(path: str | None, devices: Collection[str], family: str) -> Faults:
    """The faults in `path` now, with the resets recorded beside it; none
    when no path is set, or the file does not exist yet or is empty."""
    if not path:
        return Faults()
    try:
        raw = read_file(path, f"fault file {path}", MAX_BYTES, follow=True)
        log = Path(path).parent / REPAIRS_FILE
        made = read_file(log, str(log), MAX_BYTES, follow=True) if family == GPU_FAMILY else None
    except ReadError as e:
        raise FaultFileError(str(e)) from None
    text = "" if raw is None else raw.decode("utf-8", "replace")
    faults = parse_faults(text, devices, family, f"fault file {path}")
    if made is None:
        return faults
    return dataclasses.replace(faults, resets=parse_resets(made.decode("utf-8", "replace"), devices, str(log)))
