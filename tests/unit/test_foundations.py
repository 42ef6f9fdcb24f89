"""The foundations every module stands on: input from outside is read by
the one reader (`ray_accel.core.reader`), never by field helpers of a
module's own."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Per-field coercers: what the one reader's `Node` and `load` do.
FIELD_HELPERS = {
    "_show", "_int", "_text", "_bool", "_number", "_list", "_mapping", "_key", "_optional", "_obj", "_object",
    "_float", "_texts", "_time", "_enum", "_only", "_int_text", "_int_list", "_optional_str", "_text_or",
}  # fmt: skip
# Readers not yet moved onto the one reader; this set only shrinks.
PENDING = {
    "backends/mock/ray_accel_mock/spec.py",
    "backends/neuron/ray_accel_neuron/neuron_ls.py",
    "backends/neuron/ray_accel_neuron/monitor.py",
}


def _helpers() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted([*ROOT.glob("ray_accel/**/*.py"), *ROOT.glob("backends/*/*/**/*.py")]):
        name = str(path.relative_to(ROOT))
        if name == "ray_accel/core/reader.py":
            continue
        defined = [
            n.name
            for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.FunctionDef) and n.name in FIELD_HELPERS
        ]
        if defined:
            found[name] = defined
    return found


def test_no_field_helpers_outside_the_reader() -> None:
    found = _helpers()
    assert set(found) <= PENDING, {k: v for k, v in found.items() if k not in PENDING}
    assert set(found) == PENDING, f"{sorted(PENDING - set(found))} use the reader now: take them off PENDING"
