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
    # Health events the backend's own source saw on the device lately (a
    # count, not a verdict: the device's health is its family rule's); None:
    # no event source, or it could not be read.
    recent_events: int | None = None
