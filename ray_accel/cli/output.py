"""Printing a command's result: JSON with --json, else the text view."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import TypeVar

import click

from ray_accel.core.reader import dump

P = TypeVar("P")

json_option = click.option("--json", "as_json", is_flag=True, help="machine-readable output")


def emit(as_json: bool, payload: P, text: Callable[[P], str]) -> int:
    """`payload` as JSON (`reader.dump`: a typed view's fields are its keys), or its text view."""
    print(json.dumps(dump(payload), indent=2) if as_json else text(payload), flush=True)
    return 0


def ago(at: float | None, now: float) -> str:
    return "-" if not at else f"{max(0.0, now - at):.0f}s ago"


def progress() -> Callable[[str], None]:
    """Progress lines on stderr with the time since the command started."""
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[ray-accel {time.monotonic() - started:5.1f}s] {message}", file=sys.stderr, flush=True)

    return say
