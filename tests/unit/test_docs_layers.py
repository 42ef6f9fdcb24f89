"""The layer tables of README.md and docs/design.md say what the code has:
one row per layer, in the order `test_layers` enforces, and every type they
name in backticks defined in the package (a renamed type is renamed there
too). And `start --help` says what `--head` starts: a raylet of its own,
with no devices."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from tests.clirun import run_cli_here
from tests.unit.test_layers import LAYERS, ROOT

ROW = re.compile(r"^\| (\w+) \| `ray_accel\.(\w+)` \| (.*) \|$")
# A type as the tables name it: `Name` (capitalised, letters and digits).
TYPE = re.compile(r"`([A-Z][A-Za-z0-9]+)`")
# Ray's own types the tables name, and the module of Ray that has each.
RAY_TYPES = {
    "ScalingConfig": "ray.train",
    "AcceleratorManager": "ray._private.accelerators",
    "Node": "ray._private.node",
}


def layer_rows(document: Path) -> list[tuple[str, str, str]]:
    rows = [ROW.match(line) for line in document.read_text().splitlines()]
    return [(m.group(1), m.group(2), m.group(3)) for m in rows if m is not None]


def defined_names() -> set[str]:
    """Every class, function and module-level name assigned in `ray_accel`."""
    names: set[str] = set()
    for path in (ROOT / "ray_accel").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


@pytest.mark.parametrize("document", ["README.md", "docs/design.md"])
def test_the_layer_table_has_every_layer_in_order(document: str) -> None:
    rows = layer_rows(ROOT / document)
    assert [layer for layer, _, _ in rows] == list(LAYERS), rows
    assert all(layer == package for layer, package, _ in rows)
    assert all(holds.strip() for _, _, holds in rows), "every layer says what it holds"


@pytest.mark.parametrize("document", ["README.md", "docs/design.md"])
def test_every_type_the_layer_table_names_is_defined(document: str) -> None:
    named = {name for _, _, holds in layer_rows(ROOT / document) for name in TYPE.findall(holds)}
    assert named, "the table names types"
    rays = {name for name in named if name in RAY_TYPES}
    for name in rays:
        assert hasattr(importlib.import_module(RAY_TYPES[name]), name), f"Ray has no {name}"
    assert sorted(named - rays - defined_names()) == [], f"{document} names types the package does not define"


def test_start_help_says_the_head_is_a_raylet_without_devices() -> None:
    helped = run_cli_here("start", "--help", env={"RAYACCEL_MOCK": "trn1.32xlarge"})
    assert helped.returncode == 0
    text = " ".join(helped.stdout.split())
    assert "first partition" not in text
    assert "its head is a raylet of its own, with no devices" in text
