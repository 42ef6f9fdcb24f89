"""The classes of the bad-input catalogue: the ways bad input went wrong.

A test that feeds a bad input and asserts the clean outcome (exit 2 or a
named error, nothing changed, nothing started) carries
``@pytest.mark.badinput("<class>")``; a parametrized case may carry its own
(``pytest.param(..., marks=badinput("<class>"))``), which wins over the
function's. `tests/badinput_count.py` counts them by class.
"""

from __future__ import annotations

import pytest

CLASSES: dict[str, str] = {
    "dangerous": "Dangerous (foreign PIDs, top starting a cluster, FIFO hangs, path traversal, state dir mode)",
    "launcher": "Bad start input reaching the launcher",
    "traceback": "Tracebacks (corrupt records, unparsable files and output)",
    "exit-code": "Wrong exit codes",
    "unnamed": "Value not named / unbounded resources",
    "state": "A rejected command changes state",
    "leftover": "A process left behind",
    "masks": "Masks",
}


def badinput(cls: str) -> pytest.MarkDecorator:
    """The marker, checked against the classes when it is made."""
    if cls not in CLASSES:
        raise ValueError(f"unknown bad-input class {cls!r}; one of {sorted(CLASSES)}")
    return pytest.mark.badinput(cls)


def item_class(item: pytest.Item) -> str | None:
    """The class of one collected test: its case's marker, else its function's, else its module's."""
    own = [m for m in getattr(item, "own_markers", []) if m.name == "badinput"]
    marker = own[-1] if own else item.get_closest_marker("badinput")
    if marker is None:
        return None
    (cls,) = marker.args
    if cls not in CLASSES:
        raise ValueError(f"{item.nodeid}: unknown bad-input class {cls!r}")
    return str(cls)
