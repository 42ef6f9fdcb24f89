"""Metric samples as small typed tuples.

Backends produce these; the metrics layer exports them. A value a source does
not support is None, never an exception (the nvitop convention).
"""

from __future__ import annotations

from typing import NamedTuple


class DeviceSample(NamedTuple):
    device_id: str
    utilization: float | None  # 0..1
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    power_watts: float | None = None
    temperature_c: float | None = None
    # None: unknown (no health source, or it could not be read); never assumed healthy.
    healthy: bool | None = None
    health_reason: str | None = None
