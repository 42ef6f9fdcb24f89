"""Printing a command's result: JSON with --json, else the text view."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

import click

from ray_accel.core.reader import dump_one_level

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


def emit(as_json: bool, payload: P, text: Callable[[P], str]) -> int:
    """`payload` as JSON (`json_text`), or its text view."""
    print(json_text(payload) if as_json else text(payload), flush=True)
    return 0


def ago(at: float | None, now: float) -> str:
    return "-" if not at else f"{max(0.0, now - at):.0f}s ago"


def progress() -> Callable[[str], None]:
    """Progress lines on stderr with the time since the command started."""
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[ray-accel {time.monotonic() - started:5.1f}s] {message}", file=sys.stderr, flush=True)

    return say
