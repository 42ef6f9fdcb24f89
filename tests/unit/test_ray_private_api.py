"""Ray's private API is reached only through `ray_accel.rayapi`: no other
module of the product imports `ray._private`, `ray._raylet`, `ray.core`, any
module with an `_internal` (or other underscored) component under `ray.`,
whether at the top, lazily inside a function, through
`importlib.import_module("...")` (or any call given such a name as a string),
or as an attribute chain on `ray` (`ray._private.state`). Tests and
benchmarks may use Ray's internals for their own harness."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEAM = ("ray_accel", "rayapi")


def private(name: str) -> bool:
    """Whether the dotted `name` is in Ray's private API."""
    parts = name.split(".")
    if parts[0] != "ray" or len(parts) < 2:
        return False
    if parts[1] == "core":
        return True
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts[1:])


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` for an attribute chain on a plain name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _named(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted name) of everything a module imports or names as a module."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Call):
            args = [*node.args, *(k.value for k in node.keywords)]
            out += [(node.lineno, a.value) for a in args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted is not None:
                out.append((node.lineno, dotted))
    return out


def violations(root: Path) -> list[str]:
    """`path:line: name` of each use outside the seam (per line, the
    shortest private name: `ray._private` for `from ray._private import x`)."""
    found: list[str] = []
    for path in sorted((root / "ray_accel").rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[:2] == SEAM:
            continue
        per_line: dict[int, set[str]] = {}
        for line, name in _named(ast.parse(path.read_text(), str(path))):
            if private(name):
                per_line.setdefault(line, set()).add(name)
        for line, names in sorted(per_line.items()):
            found += [f"{rel}:{line}: {n}" for n in sorted(names) if not any(n.startswith(o + ".") for o in names)]
    return found


def test_only_the_seam_reaches_rays_private_api() -> None:
    found = violations(ROOT)
    assert found == [], "Ray's private API outside ray_accel/rayapi:\n" + "\n".join(found)


def test_the_seam_exists_and_is_used() -> None:
    seam = {p.stem for p in (ROOT / "ray_accel" / "rayapi").glob("*.py")}
    assert {"feature", "accelerators", "gcs", "auth", "node", "train", "state", "address", "serve"} <= seam
    users = [p for p in (ROOT / "ray_accel").rglob("*.py") if "ray_accel.rayapi" in p.read_text()]
    assert len(users) >= 10, "the product reaches Ray's internals through the seam"


def _tree(tmp: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp


def test_the_checker_reports_planted_uses(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "ray_accel/rayapi/ok.py": "import ray._private.utils\nfrom ray._raylet import GcsClient\n",
            "ray_accel/cluster/bad.py": (
                "import ray\nfrom ray._private import x\ndef f():\n    import ray._raylet\n    return ray.__version__\n"
            ),
            "ray_accel/train/bad.py": (
                "import importlib\n"
                "from ray import _private\n"
                "m = importlib.import_module('ray.train.v2._internal.execution.context')\n"
                "import ray.core.generated.autoscaler_pb2\n"
                "from ray.air._internal import util\n"
                "import ray\n"
                "s = ray._private.state.available_resources_per_node()\n"
            ),
            "ray_accel/train/fine.py": (
                "import ray\nfrom ray.train import ScalingConfig\n"
                "'''Docstrings may cite ray._private.state.GlobalState.'''\n"
                "v = ray.__version__\n"
            ),
        },
    )
    assert violations(root) == [
        "ray_accel/cluster/bad.py:2: ray._private",
        "ray_accel/cluster/bad.py:4: ray._raylet",
        "ray_accel/train/bad.py:2: ray._private",
        "ray_accel/train/bad.py:3: ray.train.v2._internal.execution.context",
        "ray_accel/train/bad.py:4: ray.core.generated.autoscaler_pb2",
        "ray_accel/train/bad.py:5: ray.air._internal",
        "ray_accel/train/bad.py:7: ray._private",
    ]


def test_private_names() -> None:
    private_names = [
        "ray._private.state",
        "ray._raylet",
        "ray.core.generated",
        "ray.train._internal.session",
        "ray.train.v2._internal.execution.callback",
        "ray._common.utils",
        "ray.autoscaler._private.x",
    ]
    for name in private_names:
        assert private(name), name
    for name in ("ray", "ray.train", "ray.util.state", "ray.__version__", "ray_accel._private", "rayx._private"):
        assert not private(name), name
