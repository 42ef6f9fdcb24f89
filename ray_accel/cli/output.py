"""Printing a command's result: JSON with --json, else the text view."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ray_accel.core.reader import dump

P = TypeVar("P")


def _run_state() -> dict[str, Any] | None:
    """What `cli.main` hands every command (`ray_args`, `as_json`, the
    warnings held for the JSON document); None outside `main` (a test
    invoking a command alone)."""
    ctx = click.get_current_context(silent=True)
    obj = None if ctx is None else ctx.find_root().obj
    return obj if isinstance(obj, dict) else None


def warn(message: str) -> None:
    """A warning about how the command was called (a deprecated spelling):
    a `warning: ...` line on stderr, or with --json held for the JSON document
    (the result's or the error's `warnings` list), so that stdout and stderr
    each stay one JSON document."""
    held = _run_state()
    if held is not None and held.get("as_json"):
        held.setdefault("warnings", []).append(message)
    else:
        click.echo(f"warning: {message}", err=True)


def held_warnings() -> list[str]:
    """The warnings `warn` held for this command's JSON document."""
    held = _run_state()
    return [] if held is None else list(held.get("warnings", []))


def emit(as_json: bool, payload: P, text: Callable[[P], str]) -> int:
    """`payload` as JSON (`reader.dump`: a typed view's fields are its keys),
    the warnings held for it first in its `warnings` list; or its text view."""
    if not as_json:
        print(text(payload), flush=True)
        return 0
    document = dump(payload)
    warnings = held_warnings()
    if warnings and isinstance(document, dict):
        document = {**document, "warnings": [*warnings, *document.get("warnings", [])]}
    elif warnings:
        # A document that is not an object has no place for them: stderr, one line each.
        for message in warnings:
            print(f"warning: {message}", file=sys.stderr, flush=True)
    print(json.dumps(document, indent=2), flush=True)
    return 0


def ago(at: float | None, now: float) -> str:
    return "-" if not at else f"{max(0.0, now - at):.0f}s ago"


def progress() -> Callable[[str], None]:
    """Progress lines on stderr with the time since the command started."""
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[ray-accel {time.monotonic() - started:5.1f}s] {message}", file=sys.stderr, flush=True)

    return say
