"""Foundations the whole product keeps: what crosses a boundary is a typed
value, and an untyped dict is left only at a true JSON edge."""

from __future__ import annotations

import re
from pathlib import Path

PRODUCT = Path(__file__).resolve().parents[2] / "ray_accel"
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
