"""Printing a command's result: JSON with --json, else the text view."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from ray_accel.core.reader import dump, dump_one_level

P = TypeVar("P")
# One JSON value on one line, by json's C encoder (it has none for `indent`:
# that one is pure Python, four times slower on a view of 512 partitions).
_ONE_LINE = json.JSONEncoder(separators=(", ", ": "), default=dump_one_level)

json_option = click.option("--json", "as_json", is_flag=True, help="machine-readable output")


def json_text(payload: object) -> str:
    """`payload` as JSON (what `reader.dump` makes of it: a typed view's
    fields are its keys): one top-level key a line, a list under it one
    item a line, each key's value or item on one line."""
    top: object
    if type(payload) is dict or type(payload) is list:
        top = payload
    elif dataclasses.is_dataclass(payload) or isinstance(payload, Mapping | tuple):
        top = dump_one_level(payload)
    else:
        return _ONE_LINE.encode(payload)
    if type(top) is list:
        return _block([_ONE_LINE.encode(v) for v in top], "[", "]", "  ")
    if type(top) is not dict or not top:
        return _ONE_LINE.encode(top)
    lines = []
    for key, value in top.items():
        name = _ONE_LINE.encode(str(key))
        if type(value) in (list, tuple) and value:
            lines.append(f"  {name}: " + _block([_ONE_LINE.encode(v) for v in value], "[", "  ]", "    "))
        else:
            lines.append(f"  {name}: {_ONE_LINE.encode(value)}")
    return _block(lines, "{", "}", "")


def _block(lines: list[str], opening: str, closing: str, indent: str) -> str:
    if not lines:
        return opening + closing.strip()
    return opening + "\n" + ",\n".join(indent + line for line in lines) + "\n" + closing


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
    """`payload` as JSON (`json_text`: a typed view's fields are its keys),
    the warnings held for it first in its `warnings` list; or its text view."""
    if not as_json:
        print(text(payload), flush=True)
        return 0
    warnings = held_warnings()
    if not warnings:
        print(json_text(payload), flush=True)
        return 0
    document = dump(payload)
    if isinstance(document, dict):
        document = {**document, "warnings": [*warnings, *document.get("warnings", [])]}
    else:
        # A document that is not an object has no place for them: stderr, one line each.
        for message in warnings:
            print(f"warning: {message}", file=sys.stderr, flush=True)
    print(json_text(document), flush=True)
    return 0


def ago(at: float | None, now: float) -> str:
    return "-" if not at else f"{max(0.0, now - at):.0f}s ago"


def progress() -> Callable[[str], None]:
    """Progress lines on stderr with the time since the command started."""
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[ray-accel {time.monotonic() - started:5.1f}s] {message}", file=sys.stderr, flush=True)

    return say
