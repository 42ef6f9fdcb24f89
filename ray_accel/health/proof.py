"""What proves a device out of service before it serves again, and when to
check or repair it: pure, on frozen values (the decider does the I/O).

A device out of service that is healthy again returns to its partition only
once proven (`rules.Facts.proven`): its last check since it was last healthy
again (since its fault cleared, or since its `health clear`) passed, or said
no check can run here (`unavailable`: returned as before, saying nothing was
checked). With `--return-check off`, or `--on-unhealthy report` (nothing
leaves service), every device is proven.

When a check is due (`check_due`), by its last outcome (`AGAIN`): never
checked since it came back, or a check begun and never ended (a decider
killed mid-check): now; `busy`: at the next poll; `failed`, `timeout`: once
`check_interval_s` has passed since that check ended; `passed`,
`unavailable`: not again. A repair (`repair_due`, `--repair reset`) is
tried once per fault: on an unhealthy device no raylet serves, with no
repair since its fault began.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ray_accel.core.checks import CheckOutcome, CheckResult, RepairOutcome, RepairResult
from ray_accel.core.health import DeviceHealth, Health
from ray_accel.core.health_state import HealthSettings, OnUnhealthy, Repair


@dataclass(frozen=True)
class Proof:
    """A device's checks and repairs as the decider keeps them (`KeptDevice`)."""

    check: CheckResult | None = None  # its last check that ended
    checking: float | None = None  # when a check under way began; one left from a dead decider was cut short
    repair: RepairResult | None = None  # its last repair


class Again(enum.Enum):
    """When a device is checked again after a check with an outcome."""

    NEVER = "never"  # it is proven
    NEXT_POLL = "next poll"
    INTERVAL = "after --check-interval"


AGAIN: Mapping[CheckOutcome, Again] = {
    CheckOutcome.PASSED: Again.NEVER,
    CheckOutcome.UNAVAILABLE: Again.NEVER,
    CheckOutcome.BUSY: Again.NEXT_POLL,
    CheckOutcome.FAILED: Again.INTERVAL,
    CheckOutcome.TIMEOUT: Again.INTERVAL,
}


def checks_anything(settings: HealthSettings) -> bool:
    """Whether devices are checked before they return at all."""
    return settings.return_check and settings.action is not OnUnhealthy.REPORT


def current_check(health: DeviceHealth | None, proof: Proof | None) -> CheckResult | None:
    """The device's last check, if it counts: made since it was last healthy again."""
    if health is None or health.state is not Health.HEALTHY or proof is None or proof.check is None:
        return None
    return proof.check if proof.check.started >= health.since else None


def is_proven(health: DeviceHealth | None, proof: Proof | None) -> bool:
    """Healthy, and its check since it came back let it return (no check cut short since)."""
    check = current_check(health, proof)
    if check is None or (proof is not None and proof.checking is not None):
        return False
    return AGAIN[check.outcome] is Again.NEVER


def proven(
    settings: HealthSettings,
    out: Iterable[str],
    health: Mapping[str, DeviceHealth],
    proofs: Mapping[str, Proof],
) -> frozenset[str]:
    """The devices of `out` (out of service) that may serve again once healthy."""
    if not checks_anything(settings):
        return frozenset(out)
    return frozenset(d for d in out if is_proven(health.get(d), proofs.get(d)))


def check_due(settings: HealthSettings, health: DeviceHealth | None, proof: Proof | None, now: float) -> bool:
    """Whether a device out of service that no raylet serves is to be checked now."""
    if not checks_anything(settings) or health is None or health.state is not Health.HEALTHY:
        return False
    if proof is not None and proof.checking is not None:
        return True  # begun and never ended: a decider killed mid-check
    check = current_check(health, proof)
    if check is None:
        return True
    again = AGAIN[check.outcome]
    if again is Again.NEVER:
        return False
    if again is Again.NEXT_POLL:
        return True
    return now >= check.ended + settings.check_interval_s


def repair_due(settings: HealthSettings, health: DeviceHealth | None, proof: Proof | None) -> bool:
    """Whether to repair a device out of service that no raylet serves: unhealthy,
    `--repair reset`, and no repair begun since its fault began."""
    if settings.repair is not Repair.RESET or health is None or health.state is not Health.UNHEALTHY:
        return False
    last = None if proof is None else proof.repair
    return last is None or last.started < health.since


def repair_note(repair: RepairResult | None) -> str:
    """What `health` says of a repair that leaves the device to a person."""
    if repair is None:
        return ""
    return NOTES.get(repair.outcome, "")


NOTES: Mapping[RepairOutcome, str] = {
    RepairOutcome.REBOOT_REQUIRED: "reboot required",
    RepairOutcome.OPERATOR: "the repair is the operator's",
}
