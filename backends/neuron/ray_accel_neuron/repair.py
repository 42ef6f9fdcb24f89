"""Repairing one Neuron device: the operator's.

AWS publishes no command that resets one Neuron device (none in the Neuron
documentation that docs/neuron-health-sources.md and docs/checks.md cite:
the tools' guides, the sysfs user guide, Neuron Observer's reference). The
driver's source has a per-device sysfs node `neuron<N>/reset`, but AWS
documents no use of it, and Neuron Observer's only state-changing call
starts a health check, not a repair. So ray-accel runs nothing: the repair
is the operator's, and the device stays out until it passes a check.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from ray_accel.core.checks import RepairOutcome, RepairResult

ACTION: Final = "none published"
WHY: Final = (
    "AWS publishes no command that resets one Neuron device; ray-accel runs nothing: "
    "the repair is the operator's (the device stays out until it passes a check)"
)


def operator_repair(device_id: str, clock: Callable[[], float] = time.time) -> RepairResult:
    now = clock()
    return RepairResult(
        device_id=device_id, outcome=RepairOutcome.OPERATOR, detail=WHY, action=ACTION, started=now, ended=now
    )
