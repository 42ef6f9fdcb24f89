"""Foundations the whole product keeps: input from outside is read by the one
reader (`ray_accel.core.reader`), never by field helpers of a module's own;
what crosses a boundary is a typed value, and an untyped dict is left only at
a true JSON edge."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "ray_accel"
# Per-field coercers: what the one reader's `Cursor` and `load` do.
FIELD_HELPERS = {
    "_show", "_int", "_text", "_bool", "_number", "_list", "_mapping", "_key", "_optional", "_obj", "_object",
    "_float", "_texts", "_time", "_enum", "_only", "_int_text", "_int_list", "_optional_str", "_text_or",
}  # fmt: skip
# Readers not yet moved onto the one reader; this set only shrinks.
PENDING: set[str] = set()


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


UNTYPED = r"(?:dict|Mapping)\[str, (?:Any|object)\]"
UNTYPED_MAX = 40


def test_untyped_dict_annotations() -> None:
    """`dict[str, Any]`, `Mapping[str, Any]`, `dict[str, object]` and
    `Mapping[str, object]` under ray_accel/, directly or through an alias
    (each use of an alias counts as one)."""
    sources = {p: p.read_text() for p in sorted(PRODUCT.rglob("*.py"))}
    aliases = {
        m.group(1)
        for text in sources.values()
        for m in re.finditer(rf"^(\w+)(?:\s*:\s*TypeAlias)?\s*=\s*{UNTYPED}\s*$", text, re.M)
    }
    uses = [UNTYPED, *(rf"\b{a}\b" for a in sorted(aliases))]
    per_file = {
        str(p.relative_to(PRODUCT.parent)): n
        for p, text in sources.items()
        if (n := sum(len(re.findall(u, text)) for u in uses))
    }
    count = sum(per_file.values())
    print(f"untyped dict annotations under ray_accel/: {count}")
    assert count <= UNTYPED_MAX, f"{count} untyped dict annotations (at most {UNTYPED_MAX}): {per_file}"
