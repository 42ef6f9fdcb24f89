"""Every public method and property of the plugin interfaces is used by the
product itself (not only by tests or backends): a method nothing calls is
removed instead of kept as a promise.

The health monitor waits for its caller, the health decider, built beside
it: what has no caller yet is listed in `AWAITING_CALLER`, and the list
expires by itself (a member in it that the product uses fails the test, so
the entry is removed the day its caller lands)."""

from __future__ import annotations

import ast
import inspect
from collections import defaultdict
from pathlib import Path

from ray_accel.plugins.interface import DevicePlugin, HealthMonitor, Runtime, Telemetry

ROOT = Path(__file__).resolve().parents[2]
INTERFACE = ROOT / "ray_accel" / "plugins" / "interface.py"
# Members whose product caller (the health decider, which takes every
# backend's monitor, polls it and clears a device a person fixed) is not in
# yet. `HealthMonitor.poll` and `.clear` have none either, but their names
# are matched by unrelated calls (`Popen.poll`, `dict.clear`), which this
# listing cannot tell apart.
# The repair waits for the decider's return step, which calls it (as it
# calls `DevicePlugin.check`, whose name unrelated `.check` calls already match).
AWAITING_CALLER: frozenset[str] = frozenset()


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
        for cls in (DevicePlugin, Runtime, Telemetry, HealthMonitor)
        for name in public_members(cls)
    }
    unused = [member for member, where in report.items() if not where and member not in AWAITING_CALLER]
    print("\n".join(f"{m}: {', '.join(w)}" for m, w in report.items()))
    assert not unused, f"interface members no product code uses: {unused}"
    arrived = sorted(m for m in AWAITING_CALLER if report.get(m))
    assert not arrived, f"these have a product caller now; take them out of AWAITING_CALLER: {arrived}"
    assert AWAITING_CALLER <= set(report), "AWAITING_CALLER names only interface members"
    assert len(report) >= 12, "the listing found the interfaces' members"
