"""Validators for what a user types, used at every edge before anything is
written or launched. Each raises `InputError` naming the bad value."""

from __future__ import annotations

import math
import re

from ray_accel.core.errors import InputError

# A partition name becomes a Ray label value and a file name: the label-value
# rules (letters, digits, '-', '_', '.', starting and ending with a letter or
# digit, at most 63 characters) keep it safe for both.
PARTITION_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
_HOST = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)


def ascii_int(text: str | int, what: str, lo: int | None = None, hi: int | None = None) -> int:
    """An integer written in ASCII digits (int() also takes '٤'), within [lo, hi]."""
    if isinstance(text, bool):
        raise InputError(f"{what}: {text!r} is not an integer")
    raw = str(text).strip()
    body = raw[1:] if raw.startswith("-") else raw
    if not body or not body.isascii() or not body.isdigit() or len(body) > 18:
        raise InputError(f"{what}: {text!r} is not an integer")
    value = int(raw)
    _in_range(value, what, lo, hi, text)
    return value


def finite_float(text: str | float, what: str, lo: float | None = None, hi: float | None = None) -> float:
    """A finite number (no nan, inf), within [lo, hi]."""
    if isinstance(text, bool):
        raise InputError(f"{what}: {text!r} is not a number")
    raw = str(text).strip()
    if not raw.isascii():
        raise InputError(f"{what}: {text!r} is not a number")
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"{what}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise InputError(f"{what}: {text!r} is not a finite number")
    _in_range(value, what, lo, hi, text)
    return value


def _in_range(value: float, what: str, lo: float | None, hi: float | None, shown: object) -> None:
    if lo is not None and value < lo:
        raise InputError(f"{what}: {shown!r} is below the minimum {lo:g}")
    if hi is not None and value > hi:
        raise InputError(f"{what}: {shown!r} is above the maximum {hi:g}")


def partition_name(text: str) -> str:
    if not PARTITION_NAME.match(text):
        raise InputError(
            f"bad partition name {text!r}: use 1-63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return text


def port(text: str | int, what: str) -> int:
    return ascii_int(text, what, 1024, 65535)


def host_port(text: str, what: str) -> tuple[str, int]:
    """'host:port' (an IPv4 address or a host name) with a valid port."""
    raw = text.strip()
    host, sep, port_text = raw.rpartition(":")
    if not sep or not host or not port_text:
        raise InputError(f"{what}: {text!r} is not HOST:PORT")
    if not _HOST.match(host):
        raise InputError(f"{what}: bad host {host!r} in {text!r}")
    return host, ascii_int(port_text, f"{what} port", 1, 65535)
