"""Parsing and formatting of device visibility masks.

`CUDA_VISIBLE_DEVICES` and `NEURON_RT_VISIBLE_CORES` are lists of integer ids.
The Neuron runtime also accepts ranges (`0-3,8`); Ray 2.60 splits on commas
only and reads `0-3` as one id, so every value we hand to Ray is a plain comma
list and only values for the Neuron runtime may use ranges.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Literal

from ray_accel.core.errors import InputError

# A mask names devices or cores on one host; a bound keeps `0-999999999` from
# allocating a billion-element list before anything can reject it.
MAX_VISIBLE_ID = 65535

Style = Literal["list", "ranges"]


class VisibilityError(InputError):
    """A visibility mask that cannot be parsed or formatted."""


def _parse_int(token: str, whole: str) -> int:
    if not token.isascii() or not token.isdigit():
        raise VisibilityError(f"bad id {token!r} in visibility mask {whole!r}")
    value = int(token)
    if value > MAX_VISIBLE_ID:
        raise VisibilityError(f"id {token!r} in visibility mask {whole!r} is above {MAX_VISIBLE_ID}")
    return value


def parse_visible_ids(value: str | None, total: int | None = None) -> list[int] | None:
    """Parse a mask such as ``"0-3,8"`` into ``[0, 1, 2, 3, 8]``.

    ``None`` means the variable is unset (everything visible) and gives None;
    an empty string hides everything and gives ``[]``. Order is kept as
    written, because the first listed device is device 0 inside the process.
    """
    if value is None:
        return None
    text = value.strip()
    if text == "":
        return []
    ids: list[int] = []
    seen: set[int] = set()
    for raw in text.split(","):
        token = raw.strip()
        if token == "":
            raise VisibilityError(f"empty entry in visibility mask {value!r}")
        lo_text, dash, hi_text = token.partition("-")
        lo = _parse_int(lo_text.strip(), value)
        hi = _parse_int(hi_text.strip(), value) if dash else lo
        if lo > hi:
            raise VisibilityError(f"descending range {token!r} in visibility mask {value!r}")
        for i in range(lo, hi + 1):
            if i in seen:
                raise VisibilityError(f"duplicate id {i} (from {token!r}) in visibility mask {value!r}")
            if total is not None and i >= total:
                raise VisibilityError(
                    f"id {i} (from {token!r}) in visibility mask {value!r} is out of range: the host has {total}"
                )
            seen.add(i)
            ids.append(i)
    return ids


def is_index(token: str) -> bool:
    """A device token that is an index (ASCII digits: `int` would also take
    other scripts' digits), as opposed to an opaque id such as a GPU UUID."""
    return token.isascii() and token.isdigit()


def mask_order(token: str) -> tuple[int, int | str]:
    """Sort key of device tokens as a mask lists them: indexes by number
    (Ray sorts them as strings, '10' before '2'), before opaque ids."""
    return (0, int(token)) if is_index(token) else (1, token)


def format_mask(tokens: Iterable[str]) -> str:
    """A mask from device tokens: integer ids sorted numerically as a comma list
    (Ray sorts them as strings, '10' before '2'); opaque ids such as GPU UUIDs
    kept in the order given, since the order is the device numbering inside the
    process."""
    values = [str(t).strip() for t in tokens]
    if all(is_index(v) for v in values):
        return format_visible_ids(int(v) for v in values)
    return ",".join(values)


def format_visible_ids(ids: Iterable[int], style: Style = "list") -> str:
    """Format ids as a sorted comma list, or with runs collapsed to ``a-b``."""
    values = list(ids)
    for i in values:
        if isinstance(i, bool) or not isinstance(i, int) or i < 0 or i > MAX_VISIBLE_ID:
            raise VisibilityError(f"bad id {i!r}: ids are integers 0..{MAX_VISIBLE_ID}")
    ordered = sorted(values)
    for a, b in itertools.pairwise(ordered):
        if a == b:
            raise VisibilityError(f"duplicate id {a}")
    if style == "list":
        return ",".join(str(i) for i in ordered)
    if style != "ranges":
        raise VisibilityError(f"unknown style {style!r}: use 'list' or 'ranges'")
    # A run of consecutive ids keeps one difference between id and position.
    runs = [[i for _, i in run] for _, run in itertools.groupby(enumerate(ordered), lambda t: t[1] - t[0])]
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)
