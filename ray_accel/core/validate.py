"""Validators for what a user types, used at every edge before anything is
written or launched. Each raises `InputError` naming the bad value."""

from __future__ import annotations

import math
import re

from ray_accel.core.errors import InputError
from ray_accel.core.reader import parse_json

# A non-empty Ray label value, and the name part of a label key (Ray 2.60,
# ray/_private/label_utils.py: LABEL_REGEX): letters, digits, '-', '_', '.',
# starting and ending with a letter or digit, at most 63 characters.
LABEL_VALUE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
# A partition name becomes a Ray label value and a file name: the label-value
# rules keep it safe for both.
PARTITION_NAME = LABEL_VALUE
HEAD = "head"  # the name of a head's own raylet, which holds no devices
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"^{_HOST_LABEL}(?:\.{_HOST_LABEL})*$")


def ascii_int(text: str | int, what: str, lo: int | None = None, hi: int | None = None) -> int:
    """An integer written in ASCII digits (int() also takes '٤'), within [lo, hi]."""
    raw = str(text).strip()
    body = raw.removeprefix("-")
    if isinstance(text, bool) or not body.isascii() or not body.isdigit() or len(body) > 18:
        raise InputError(f"{what}: {text!r} is not an integer")
    value = int(raw)
    _in_range(value, what, lo, hi, text)
    return value


def finite_float(text: str | float, what: str, lo: float | None = None, hi: float | None = None) -> float:
    """A finite number (no nan, inf), within [lo, hi]."""
    try:
        if isinstance(text, bool) or not str(text).isascii():
            raise ValueError(text)
        value = float(str(text))
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
    if text == HEAD:
        raise InputError(f"bad partition name {text!r}: it names the head raylet of `start --head`")
    if not PARTITION_NAME.match(text):
        raise InputError(
            f"bad partition name {text!r}: use 1-63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return text


def host_port(text: str, what: str) -> tuple[str, int]:
    """'host:port' (an IPv4 address or a host name) with a valid port."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not host or not port_text:
        raise InputError(f"{what}: {text!r} is not HOST:PORT")
    if not _HOST.match(host):
        raise InputError(f"{what}: bad host {host!r} in {text!r}")
    return host, ascii_int(port_text, f"{what} port", 1, 65535)


# Node labels follow Kubernetes label syntax, as Ray 2.60 checks them
# (ray/_private/label_utils.py: LABEL_REGEX, LABEL_PREFIX_REGEX,
# validate_label_key, validate_label_value): a key is an optional DNS-subdomain
# prefix (at most 253 characters) and '/', then a name; name and value are at
# most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or
# digit (a value may be empty). Keys under `ray.io/` are Ray's own.
# Prefix parts are DNS labels: no dots inside, none empty ("sub..domain" is
# refused, as Ray's own comment says it should be).
_DNS_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
_LABEL_PREFIX = re.compile(rf"^{_DNS_LABEL}(?:\.{_DNS_LABEL})*$")
RAY_LABEL_PREFIX = "ray.io/"


def label_key(key: str, what: str) -> str:
    prefix, sep, name = key.rpartition("/")
    if sep and (not prefix or len(prefix) > 253 or not _LABEL_PREFIX.match(prefix)):
        raise InputError(f"{what}: bad label key prefix {prefix!r} in {key!r}: use DNS labels separated by dots")
    if not LABEL_VALUE.match(name):
        raise InputError(
            f"{what}: bad label key {key!r}: the name is 1-63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    if key.startswith(RAY_LABEL_PREFIX):
        raise InputError(f"{what}: label key {key!r} is under {RAY_LABEL_PREFIX}, which Ray keeps for its own labels")
    return key


def label_value(value: str, key: str, what: str) -> str:
    if value and not LABEL_VALUE.match(value):
        raise InputError(
            f"{what}: bad value {value!r} for label {key!r}: 0-63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return value


def node_labels(text: str, what: str = "--labels") -> dict[str, str]:
    """`key=value,key2=value2` (the form `ray start --labels` takes) into a dict."""
    out: dict[str, str] = {}
    if not text.strip():
        return out
    for pair in text.split(","):
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or "=" in value:
            raise InputError(f"{what}: {pair!r} is not key=value")
        label_key(key, what)
        label_value(value, key, what)
        if key in out:
            raise InputError(f"{what}: label {key!r} is given twice")
        out[key] = value
    return out


def resource_amounts(text: str, what: str = "--resources") -> dict[str, float]:
    """A JSON object of resource name -> amount (`ray start --resources`): each
    amount a finite number >= 0 with at most 4 decimals (Ray's unit is 1/10000)."""
    data = parse_json(text, repr(text), f"{what}: {{source}} is not JSON: {{error}}", nan=True)
    if not isinstance(data, dict):
        raise InputError(f"{what}: {text!r} is not a JSON object such as '{{\"license\": 4}}'")
    out: dict[str, float] = {}
    for name, amount in data.items():
        if not name.strip() or name != name.strip():
            raise InputError(f"{what}: bad resource name {name!r}")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            raise InputError(f"{what}: amount of {name!r} is {amount!r}, not a number")
        if not math.isfinite(amount) or amount < 0:
            raise InputError(f"{what}: amount of {name!r} is {amount!r}; give a finite number >= 0")
        if abs(amount * 10000 - round(amount * 10000)) > 1e-6:
            raise InputError(f"{what}: amount of {name!r} is {amount!r}; Ray counts in units of 0.0001")
        out[name] = float(amount)
    return out
