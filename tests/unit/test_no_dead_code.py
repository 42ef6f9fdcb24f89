"""No function or method of the product is called only by tests.

Read from the source (no imports, so it is fast). The definitions checked
are the functions at module level and the methods of classes at module level
under `ray_accel/` and `backends/*/ray_accel_*/`; the uses counted are those
in those same files, `examples/` and `benchmarks/`, outside the definition's
own body (a function that only calls itself is unused):

- a function counts as used when its module reads its name, a file that
  imports it by name (`from m import f`) reads the name, a file that imports
  its module reads the attribute (`m.f`), or a string constant anywhere is
  exactly its name (a `getattr` table, `__all__`, a lazy `__getattr__`);
- a method counts as used when any of those files reads the attribute
  (`x.m`, which also covers every implementation of an interface method a
  caller reaches through the base class) or holds its name as a string.

A name that several methods share counts for all of them: the rule cannot
tell them apart, and a false "dead" is worse than a missed one. Exempt,
because something outside the product calls them: dunder methods; click
commands (decorated `@<group>.command`/`.group`); entry points named in a
`pyproject.toml`; the hooks in `CALLED_BY_FRAMEWORKS`."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Method name -> who calls it on a class ray-accel defines.
CALLED_BY_FRAMEWORKS: dict[str, str] = {
    "convert": "click, on a ParamType (cli/params.py)",
    "list_commands": "click, on a Group (the lazy group of cli/__init__.py)",
    "get_command": "click, on a Group (the lazy group of cli/__init__.py)",
    "format_commands": "click, on a Group, for its --help (cli/__init__.py)",
    "on_training_start": "Ray Train, on a Backend (train/backend.py)",
    "on_shutdown": "Ray Train, on a Backend (train/backend.py)",
    "backend_cls": "Ray Train, on a BackendConfig (train/config.py)",
    "train_func_context": "Ray Train, on a BackendConfig (train/config.py)",
    "after_controller_start": "Ray Train's controller, on a callback (train/callback.py)",
    "after_controller_state_update": "Ray Train's controller, on a callback (train/callback.py)",
}

Def = ast.FunctionDef | ast.AsyncFunctionDef


def product_files() -> list[Path]:
    """The files whose definitions must be used."""
    return sorted([*(ROOT / "ray_accel").rglob("*.py"), *ROOT.glob("backends/*/ray_accel_*/**/*.py")])


def reader_files() -> list[Path]:
    """The files whose reads count as uses: the product, its examples and its benchmarks."""
    return sorted({*product_files(), *(ROOT / "examples").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")})


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "backends":
        parts = parts[2:]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def entry_points() -> set[str]:
    """Function names that a `pyproject.toml` names as an entry point (`module:function`)."""
    found: set[str] = set()
    for pyproject in [ROOT / "pyproject.toml", *ROOT.glob("backends/*/pyproject.toml")]:
        found.update(re.findall(r'=\s*"[\w.]+:(\w+)"', pyproject.read_text()))
    return found


def is_click_command(fn: Def) -> bool:
    for deco in fn.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(target, ast.Attribute) and target.attr in {"command", "group"}:
            return True
    return False


@dataclass
class Reader:
    """What one file reads, each read with its line."""

    path: Path
    names: dict[str, list[int]] = field(default_factory=dict)
    attributes: dict[str, list[int]] = field(default_factory=dict)
    strings: dict[str, list[int]] = field(default_factory=dict)
    imported_names: set[str] = field(default_factory=set)
    imported_modules: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, path: Path) -> Reader:
        r = cls(path)
        package = module_name(path).split(".")
        if path.name != "__init__.py":
            package = package[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name):
                r.names.setdefault(node.id, []).append(node.lineno)
            elif isinstance(node, ast.Attribute):
                r.attributes.setdefault(node.attr, []).append(node.lineno)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                r.strings.setdefault(node.value, []).append(node.lineno)
            elif isinstance(node, ast.Import):
                r.imported_modules.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:  # relative: from the package `level - 1` steps up
                    source = ".".join([*package[: len(package) - node.level + 1], *([source] if source else [])])
                r.imported_names.update(a.name for a in node.names)
                r.imported_modules.update(f"{source}.{a.name}" for a in node.names)
                r.imported_modules.add(source)
        return r


def outside(lines: list[int], reader: Reader, where: Path, fn: Def) -> bool:
    """Whether any of `lines` in `reader`'s file lies outside `fn`'s body."""
    return any(not (reader.path == where and fn.lineno <= ln <= (fn.end_lineno or fn.lineno)) for ln in lines)


def definitions(tree: ast.Module) -> Iterator[tuple[Def, bool]]:
    """(definition, is a method) for module-level functions and methods of module-level classes."""
    for node in tree.body:
        if isinstance(node, Def):
            yield node, False
        elif isinstance(node, ast.ClassDef):
            yield from ((n, True) for n in node.body if isinstance(n, Def))


def used(fn: Def, method: bool, path: Path, readers: list[Reader]) -> bool:
    name, module = fn.name, module_name(path)
    for r in readers:
        if outside(r.strings.get(name, []), r, path, fn):
            return True
        if (method or module in r.imported_modules) and outside(r.attributes.get(name, []), r, path, fn):
            return True
        if not method and (r.path == path or name in r.imported_names) and outside(r.names.get(name, []), r, path, fn):
            return True
    return False


def offenders() -> list[str]:
    exempt = entry_points() | set(CALLED_BY_FRAMEWORKS)
    readers = [Reader.of(p) for p in reader_files()]
    dead: list[str] = []
    for path in product_files():
        for fn, method in definitions(ast.parse(path.read_text())):
            name = fn.name
            if (name.startswith("__") and name.endswith("__")) or name in exempt or is_click_command(fn):
                continue
            if not used(fn, method, path, readers):
                dead.append(f"{path.relative_to(ROOT)}: {name}")
    return dead


def test_every_function_is_used_by_the_product() -> None:
    dead = offenders()
    assert not dead, "used by nothing but tests: delete, or move into tests/:\n" + "\n".join(dead)


def test_every_framework_hook_listed_is_defined() -> None:
    defined = {fn.name for p in product_files() for fn, _ in definitions(ast.parse(p.read_text()))}
    stale = sorted(set(CALLED_BY_FRAMEWORKS) - defined)
    assert not stale, f"no product class defines these any more; take them out of CALLED_BY_FRAMEWORKS: {stale}"


def test_the_rule_sees_the_product_and_its_uses() -> None:
    assert len(product_files()) > 100
    assert "main" in entry_points(), "the CLI's entry point is read from pyproject.toml"
    assert module_name(ROOT / "backends/mock/ray_accel_mock/spec.py") == "ray_accel_mock.spec"
    reader = Reader.of(ROOT / "ray_accel" / "cli" / "__init__.py")
    assert "ray_accel.core.errors" in reader.imported_modules, "imports are resolved to modules"
    tree = ast.parse("def lonely() -> None:\n    lonely()\n")
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    assert not outside([2], Reader(ROOT / "x.py"), ROOT / "x.py", fn), "a call from its own body is no use"
