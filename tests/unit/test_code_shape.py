"""Two rules of shape, checked on the source with `ast`:

- a dataclass of more than six fields is `kw_only`, and nothing builds one
  with positional arguments: its fields are often `--json` keys, and
  neighbours share a type (`in_use`, `total`), so a reorder built by position
  would swap values silently;
- no two classes of the product share a name, so a name in a traceback, a
  review or the docs means one thing.

The scanner is tested on small code strings first, so a rule that finds
nothing in the product is known to be able to find something."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MOST_POSITIONAL_FIELDS = 6
# The packages whose classes are "the product"; an import from one of them binds a product class.
PRODUCT_PACKAGES = ("ray_accel", "ray_accel_mock", "ray_accel_cuda", "ray_accel_neuron")


@dataclass(frozen=True)
class DataclassShape:
    module: str
    name: str
    line: int
    own_fields: int
    bases: tuple[str, ...]  # the names its bases are written with
    kw_only: bool
    # A NamedTuple cannot be kw_only (it is a tuple: indexed, unpacked, `_replace`d), but a wide
    # one is still built by keyword.
    named_tuple: bool = False


def product_files() -> list[Path]:
    return sorted([*(ROOT / "ray_accel").rglob("*.py"), *ROOT.glob("backends/*/ray_accel_*/**/*.py")])


def caller_files() -> list[Path]:
    """Every file that may build a product value: the product, its tests, benchmarks and examples."""
    others = [*(ROOT / "benchmarks").rglob("*.py"), *(ROOT / "examples").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
    return sorted({*product_files(), *others})


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "backends":
        parts = parts[2:]  # backends/mock/ray_accel_mock/x.py is ray_accel_mock.x
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _dataclass_decorator(decorator: ast.expr) -> ast.expr | None:
    """The decorator if it is `dataclass`, `dataclasses.dataclass` or a call of either."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(target, ast.Name) and target.id == "dataclass":
        return decorator
    if isinstance(target, ast.Attribute) and target.attr == "dataclass":
        return decorator
    return None


def _says_kw_only(decorator: ast.expr) -> bool:
    if not isinstance(decorator, ast.Call):
        return False
    for keyword in decorator.keywords:
        if keyword.arg == "kw_only":
            return isinstance(keyword.value, ast.Constant) and keyword.value.value is True
    return False


def _is_field(statement: ast.stmt) -> bool:
    """An annotated name in a dataclass body, less the ClassVars and the KW_ONLY marker."""
    if not isinstance(statement, ast.AnnAssign) or not isinstance(statement.target, ast.Name):
        return False
    annotation = ast.unparse(statement.annotation)
    return "ClassVar" not in annotation and "KW_ONLY" not in annotation


def dataclass_shapes(source: str, module: str) -> list[DataclassShape]:
    shapes = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        decorators = [d for d in node.decorator_list if _dataclass_decorator(d) is not None]
        bases = tuple(ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases)
        named_tuple = "NamedTuple" in bases
        if not decorators and not named_tuple:
            continue
        shapes.append(
            DataclassShape(
                module=module,
                name=node.name,
                line=node.lineno,
                own_fields=sum(1 for statement in node.body if _is_field(statement)),
                bases=bases,
                kw_only=any(_says_kw_only(d) for d in decorators),
                named_tuple=named_tuple,
            )
        )
    return shapes


def field_count(shape: DataclassShape, by_name: Mapping[str, DataclassShape]) -> int:
    """Its fields with those it inherits from dataclasses among `by_name` (class names are unique, see below)."""
    inherited = sum(field_count(by_name[base], by_name) for base in shape.bases if base in by_name)
    return shape.own_fields + inherited


def wide_dataclasses(sources: Mapping[str, str]) -> dict[str, DataclassShape]:
    """The dataclasses and NamedTuples of more than six fields among `sources` (module name -> text), by class name."""
    shapes = [shape for module, source in sources.items() for shape in dataclass_shapes(source, module)]
    by_name = {shape.name: shape for shape in shapes}
    return {shape.name: shape for shape in shapes if field_count(shape, by_name) > MOST_POSITIONAL_FIELDS}


def without_kw_only(wide: Mapping[str, DataclassShape]) -> list[str]:
    return [f"{s.module}:{s.line} {s.name}" for s in wide.values() if not s.kw_only and not s.named_tuple]


def _bound_names(tree: ast.Module, module: str, wide: Mapping[str, DataclassShape]) -> dict[str, str]:
    """Local name -> wide dataclass, for names a file binds to one: its own classes and its imports
    from the product (an import of another library's class of the same name binds nothing)."""
    bound = {name: name for name, shape in wide.items() if shape.module == module}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        source = node.module or ""
        from_product = node.level > 0 or source.split(".")[0] in PRODUCT_PACKAGES
        if not from_product:
            continue
        for alias in node.names:
            if alias.name in wide:
                bound[alias.asname or alias.name] = alias.name
    return bound


def positional_calls(source: str, module: str, wide: Mapping[str, DataclassShape]) -> list[str]:
    """Each call of a wide dataclass with a positional argument: by a name the file binds to one,
    as `module.Name(...)`, or as `cls(...)` inside the class's own body."""
    tree = ast.parse(source)
    bound = _bound_names(tree, module, wide)
    found = []

    def visit(node: ast.AST, enclosing: str | None) -> None:
        if isinstance(node, ast.ClassDef):
            enclosing = node.name
        if isinstance(node, ast.Call) and node.args:
            called = _called_class(node.func, bound, wide, enclosing)
            if called is not None:
                found.append(f"{module}:{node.lineno} {called}")
        for child in ast.iter_child_nodes(node):
            visit(child, enclosing)

    visit(tree, None)
    return found


def _called_class(
    func: ast.expr, bound: Mapping[str, str], wide: Mapping[str, DataclassShape], enclosing: str | None
) -> str | None:
    if isinstance(func, ast.Name) and func.id in bound:
        return bound[func.id]
    if isinstance(func, ast.Name) and func.id == "cls" and enclosing in wide:
        return enclosing
    if isinstance(func, ast.Attribute) and func.attr in wide:
        return func.attr
    return None


def class_names(source: str, module: str) -> list[tuple[str, str]]:
    """(class name, where) for every class a module defines, nested ones too."""
    return [
        (node.name, f"{module}:{node.lineno}") for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ClassDef)
    ]


def shared_names(found: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    places: dict[str, list[str]] = {}
    for name, where in found:
        places.setdefault(name, []).append(where)
    return {name: wheres for name, wheres in places.items() if len(wheres) > 1}


def _sources(paths: Iterable[Path]) -> dict[str, str]:
    return {module_name(path): path.read_text() for path in paths}


# The scanner itself, on small code strings.

SEVEN_FIELDS = """
from dataclasses import dataclass
import dataclasses

@dataclass(frozen=True)
class Wide:
    a: int
    b: int
    c: int
    d: int
    e: int
    f: int
    g: int

@dataclasses.dataclass(frozen=True, kw_only=True)
class WideKeyed:
    a: int
    b: int
    c: int
    d: int
    e: int
    f: int
    g: int

@dataclass
class Narrow:
    a: int
    b: int
    c: int
    d: int
    e: int
    f: int
    LIMIT: ClassVar[int] = 3

class Row(typing.NamedTuple):
    a: int
    b: int
    c: int
    d: int
    e: int
    f: int
    g: int
"""


def test_scanner_finds_a_wide_dataclass_without_kw_only() -> None:
    wide = wide_dataclasses({"pkg.values": SEVEN_FIELDS})
    assert sorted(wide) == ["Row", "Wide", "WideKeyed"], "six fields and a ClassVar are not wide"
    assert without_kw_only(wide) == ["pkg.values:6 Wide"], "a NamedTuple cannot be kw_only, and need not"


def test_scanner_counts_inherited_fields() -> None:
    base = "from dataclasses import dataclass\n@dataclass\nclass Base:\n" + "".join(f"    {f}: int\n" for f in "abcd")
    child = "from pkg.base import Base\n@dataclass\nclass Child(Base):\n" + "".join(f"    {f}: int\n" for f in "efg")
    assert without_kw_only(wide_dataclasses({"pkg.base": base, "pkg.child": child})) == ["pkg.child:3 Child"]


def test_scanner_finds_positional_calls_by_every_name() -> None:
    wide = wide_dataclasses({"ray_accel.values": SEVEN_FIELDS})
    caller = """
from ray_accel.values import Wide as W, Narrow
from ray_accel import values
from elsewhere import WideKeyed

W(1, b=2, c=3, d=4, e=5, f=6, g=7)
values.WideKeyed(1, 2, 3, 4, 5, 6, 7)
W(a=1, b=2, c=3, d=4, e=5, f=6, g=7)
Narrow(1, 2, 3, 4, 5, 6)
WideKeyed(1, 2, 3, 4, 5, 6, 7)
values.Row(1, 2, 3, 4, 5, 6, g=7)
"""
    assert positional_calls(caller, "tests.x", wide) == ["tests.x:6 Wide", "tests.x:7 WideKeyed", "tests.x:11 Row"]
    own = SEVEN_FIELDS + "\nWide(1, 2, 3, 4, 5, 6, 7)\n"
    assert positional_calls(own, "ray_accel.values", wide) == ["ray_accel.values:44 Wide"]
    factory = (
        "from ray_accel.values import Wide\nclass Wide:\n    @classmethod\n    def of(cls):\n        return cls(1)\n"
    )
    assert positional_calls(factory, "tests.y", wide) == ["tests.y:5 Wide"]


def test_scanner_finds_shared_class_names() -> None:
    first = class_names("class Action:\n    pass\nclass Only:\n    class Inner:\n        pass\n", "a")
    second = class_names("class Action:\n    pass\nclass Inner:\n    pass\n", "b")
    assert shared_names([*first, *second]) == {"Action": ["a:1", "b:1"], "Inner": ["a:4", "b:3"]}


# The rules, on the product.


def test_wide_dataclasses_are_kw_only() -> None:
    wide = wide_dataclasses(_sources(product_files()))
    assert "HostRecord" in wide, "the scan must see the product's wide values"
    assert without_kw_only(wide) == []


def test_no_wide_dataclass_is_built_by_position() -> None:
    wide = wide_dataclasses(_sources(product_files()))
    found = [
        call for module, source in _sources(caller_files()).items() for call in positional_calls(source, module, wide)
    ]
    assert found == []


def test_no_two_product_classes_share_a_name() -> None:
    found = [entry for module, source in _sources(product_files()).items() for entry in class_names(source, module)]
    assert len(found) > 100, "the scan must see the product's classes"
    assert shared_names(found) == {}
