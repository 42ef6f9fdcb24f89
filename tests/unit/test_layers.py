"""The layering rule, checked on every import in the product (lazy ones inside
functions too): a module may import its own layer or a lower one, never a
higher one. Backends sit beside `plugins`: they may use `core` and `plugins`.
And no import circle among ray_accel's modules, lazy imports counted.

The layer tables of README.md and docs/design.md say what the code has:
one row per layer, in the order checked here, and every type they name in
backticks defined in the package (a renamed type is renamed there too). And
`start --help` says what `--head` starts: a raylet of its own, with no
devices."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from tests.clirun import run_cli_here

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
    "hostops",
    "health",
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
            "ray_accel/core/bad.py": "def f():\n    from ray_accel.cluster.statedir import load\n",
            "ray_accel/hooks/bad.py": "from ray_accel import train\n",
            "ray_accel/metrics/bad.py": "from ray_accel import init\n",
            "ray_accel/cli/ok.py": "from ray_accel import __version__\n",
            "backends/x/ray_accel_x/plugin.py": "from ray_accel.bridge.managers import install\n",
        },
    )
    assert violations(root) == [
        "ray_accel/core/bad.py:2: core imports ray_accel.cluster.statedir (cluster)",
        "ray_accel/hooks/bad.py:1: hooks imports ray_accel.train (train)",
        "ray_accel/metrics/bad.py:1: metrics imports ray_accel.init (cli)",
        "backends/x/ray_accel_x/plugin.py:1: a backend imports ray_accel.bridge.managers (bridge)",
    ]


def _module_names(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under ray_accel (a package by its
    own name, for its __init__)."""
    out = {}
    for path in sorted((root / "ray_accel").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the ray_accel modules it imports, anywhere in it. `from p
    import x` imports the module p.x when there is one, else p (a name in
    it); importing p.x is not counted as importing p's __init__, which
    Python runs first but which a circle through a package's own facade
    would make of every package."""
    modules = _module_names(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names
                ]
            else:
                continue
            deps |= {t for t in targets if t in modules and t != name}
        graph[name] = deps
    return graph


def import_cycles(root: Path) -> list[list[str]]:
    """Every import circle among ray_accel's modules, each as the path that
    closes it (`a -> b -> a`), from each strongly connected group's first
    module."""
    graph = import_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_circle(graph, group) for group in sorted(groups, key=min)]


def _circle(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest path inside `group` from its first module back to itself."""
    start = min(group)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & group):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    raise AssertionError(f"no circle through {start} in {sorted(group)}")


def test_no_import_circles() -> None:
    cycles = import_cycles(ROOT)
    assert cycles == [], "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_checker_reports_a_planted_circle_through_a_lazy_import(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "ray_accel/__init__.py": "",
            "ray_accel/cli/__init__.py": "from ray_accel.cli.a import run\n",
            "ray_accel/cli/a.py": "from ray_accel.cli import b\n",
            "ray_accel/cli/b.py": "def f():\n    from ray_accel.cli.c import g\n",
            "ray_accel/cli/c.py": "import ray_accel.cli.a\n",
            "ray_accel/core/__init__.py": "",
            "ray_accel/core/ok.py": "from ray_accel.core import errors\n",
            "ray_accel/core/errors.py": "from ray_accel.core.ok import x\n",
            "ray_accel/core/fine.py": "from ray_accel.core import errors\n",
        },
    )
    assert import_cycles(root) == [
        ["ray_accel.cli.a", "ray_accel.cli.b", "ray_accel.cli.c", "ray_accel.cli.a"],
        ["ray_accel.core.errors", "ray_accel.core.ok", "ray_accel.core.errors"],
    ]


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
