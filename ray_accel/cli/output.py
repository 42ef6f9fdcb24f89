"""Printing a command's result: JSON with --json, else the text view."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any


def emit(as_json: bool, payload: dict[str, Any], text: Callable[[dict[str, Any]], str]) -> int:
    print(json.dumps(payload, indent=2) if as_json else text(payload))
    return 0


def progress() -> Callable[[str], None]:
    """Progress lines on stderr with the time since the command started."""
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[ray-accel {time.monotonic() - started:5.1f}s] {message}", file=sys.stderr, flush=True)

    return say
