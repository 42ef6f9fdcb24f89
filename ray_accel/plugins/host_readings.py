"""A health monitor's host-wide readings, handed from the decider to the
host's telemetry through one file in the state directory: one source
process per host (owned by the decider) instead of one per exporter.

After each poll the decider writes `<state dir>/readings.json`: when, its
poll interval, and its monitor's `readings()` (the backend's JSON, opaque
here). A reader takes them while they are fresh (three poll intervals and a
margin); readings that are missing, unreadable or older are none, with why,
so a backend says the values are unknown, never zero.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from ray_accel.core.reader import Cursor, ReadError, parse_json, read_file

READINGS_FILE = "readings.json"
MAX_BYTES = 64 << 20
FRESH_POLLS = 3
MARGIN_S = 5.0


def readings_json(readings: Mapping[str, object] | None, at: float, interval_s: float) -> str:
    return json.dumps({"at": at, "interval_s": interval_s, "readings": readings})


def read_readings(directory: Path | None, now: float) -> tuple[Mapping[str, object] | None, str | None]:
    """The decider's fresh readings, or (None, why there are none)."""
    if directory is None:
        return None, "no state directory to read the health decider's readings from"
    path = directory / READINGS_FILE
    try:
        raw = read_file(path, str(path), MAX_BYTES)
        if raw is None:
            return None, f"no health decider readings ({path} does not exist)"
        top = Cursor(parse_json(raw, str(path), nan=True), str(path))
        at, interval = top.at("at").number(0.0), top.at("interval_s").number(0.0)
        readings = top.at("readings").optional()
        data = None if readings is None else readings.mapping()
    except ReadError as e:
        return None, str(e)
    if now - at > FRESH_POLLS * interval + MARGIN_S:
        return None, f"the health decider's readings ({path}) are {now - at:.0f}s old"
    if data is None:
        return None, "the health decider's monitor has no host-wide readings"
    return data, None
