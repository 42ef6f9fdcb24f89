"""The layering rule, checked on every import in the product (lazy ones inside
functions too): a module may import its own layer or a lower one, never a
higher one. Backends sit beside `plugins`: they may use `core` and `plugins`."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Lowest first; the order of docs/design.md.
LAYERS = (
    "core",
    "rayapi",
    "plugins",
    "partition",
    "hooks",
    "metrics",
    "bridge",
    "cluster",
    "placement",
    "jobs",
    "train",
    "cli",
)
BACKEND_MAY_USE = ("core", "plugins")


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "ray_accel":
                # `from ray_accel import cluster` names a layer through the package;
                # `from ray_accel import init` uses the facade.
                out += [(node.lineno, f"ray_accel.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, node.module))
    return out


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "ray_accel":
        return None
    if len(parts) == 1 or parts[1] not in LAYERS:
        return LAYERS.index("cli")  # the package facade (and its public names) sit at the top, with the CLI
    return LAYERS.index(parts[1])


def violations(root: Path) -> list[str]:
    found = []
    for path in sorted((root / "ray_accel").rglob("*.py")):
        rel = path.relative_to(root)
        if len(rel.parts) < 3:
            continue  # ray_accel/__init__.py: the public facade may name anything
        own = LAYERS.index(rel.parts[1])
        for line, module in _imports(path):
            target = _layer(module)
            if target is not None and target > own:
                found.append(f"{rel}:{line}: {LAYERS[own]} imports {module} ({_name(target)})")
    for path in sorted((root / "backends").glob("*/ray_accel_*/**/*.py")):
        for line, module in _imports(path):
            target = _layer(module)
            if target is not None and _name(target) not in BACKEND_MAY_USE:
                found.append(f"{path.relative_to(root)}:{line}: a backend imports {module} ({_name(target)})")
    return found


def _name(index: int) -> str:
    return LAYERS[index]


def test_no_module_imports_a_higher_layer() -> None:
    assert violations(ROOT) == []


def test_every_layer_folder_is_known() -> None:
    folders = {p.name for p in (ROOT / "ray_accel").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= set(LAYERS), f"unknown layer folders: {folders - set(LAYERS)}"


def _tree(tmp: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp


def test_the_checker_reports_an_upward_import_even_inside_a_function(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "ray_accel/core/ok.py": "from ray_accel.core import errors\n",
            "ray_accel/partition/plan.py": "import ray_accel.plugins.interface\n",
            "ray_accel/core/bad.py": "def f():\n    from ray_accel.cluster.state import load\n",
            "ray_accel/hooks/bad.py": "from ray_accel import train\n",
            "ray_accel/metrics/bad.py": "from ray_accel import init\n",
            "ray_accel/cli/ok.py": "from ray_accel import __version__\n",
            "backends/x/ray_accel_x/plugin.py": "from ray_accel.bridge.managers import install\n",
        },
    )
    assert violations(root) == [
        "ray_accel/core/bad.py:2: core imports ray_accel.cluster.state (cluster)",
        "ray_accel/hooks/bad.py:1: hooks imports ray_accel.train (train)",
        "ray_accel/metrics/bad.py:1: metrics imports ray_accel.init (cli)",
        "backends/x/ray_accel_x/plugin.py:1: a backend imports ray_accel.bridge.managers (bridge)",
    ]
