"""Every public method and property of the plugin interfaces is used by the
product itself (not only by tests or backends): a method nothing calls is
removed instead of kept as a promise."""

from __future__ import annotations

import ast
import inspect
from collections import defaultdict
from pathlib import Path

from ray_accel.plugins.interface import DevicePlugin, Runtime, Telemetry

ROOT = Path(__file__).resolve().parents[2]
INTERFACE = ROOT / "ray_accel" / "plugins" / "interface.py"


def public_members(cls: type) -> list[str]:
    return sorted(n for n, _ in inspect.getmembers(cls) if not n.startswith("_"))


def uses_in_product() -> dict[str, list[str]]:
    """Attribute name -> the product modules that read it (interface.py excluded)."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted((ROOT / "ray_accel").rglob("*.py")):
        if path == INTERFACE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                found[node.attr].append(str(path.relative_to(ROOT)))
    return found


def test_every_interface_member_is_used_by_the_product() -> None:
    used = uses_in_product()
    report = {
        f"{cls.__name__}.{name}": sorted(set(used.get(name, [])))
        for cls in (DevicePlugin, Runtime, Telemetry)
        for name in public_members(cls)
    }
    unused = [member for member, where in report.items() if not where]
    print("\n".join(f"{m}: {', '.join(w)}" for m, w in report.items()))
    assert not unused, f"interface members no product code uses: {unused}"
    assert len(report) >= 12, "the listing found the interfaces' members"
