"""The suite is organised by behaviour, so a test is found where its subject is.

Tests live in the file of the module or behaviour they test, never in a file
named for a coverage gap (`test_coverage_*`); a helper two test modules share
lives in a helper module under tests/ (any name but `test_*.py` and
`conftest.py`), so no file imports a test module or a conftest; and one
subject has one file in a folder: no two test files whose names differ only
by underscores (`test_start_args.py` beside `test_startargs.py`)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def is_test_module(name: str) -> bool:
    """A dotted module name whose last part is a test module or a conftest."""
    last = name.rsplit(".", 1)[-1]
    return last.startswith("test_") or last == "conftest"


def package_of(path: Path) -> str:
    """The dotted package a file under the repository root is in."""
    return ".".join(path.relative_to(ROOT).parent.parts)


def absolute(package: str, level: int, module: str | None) -> str:
    """The module a `from ... import` names, relative ones resolved against `package`."""
    if level == 0:
        return module or ""
    parts = package.split(".")
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, module] if module else base)


def imported_test_modules(source: str, package: str) -> list[str]:
    """Every test module or conftest `source` imports, at the top or inside a
    function: `import tests.x.test_y`, `from tests.x.test_y import ...`,
    `from tests.x import test_y`, relative forms, and bare `test_y`/`conftest`
    (importable where pytest put a test folder on sys.path)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if is_test_module(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            module = absolute(package, node.level, node.module)
            if is_test_module(module):
                found.append(module)
            else:
                found += [f"{module}.{alias.name}" for alias in node.names if is_test_module(alias.name)]
    return found


def suite_test_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def same_subject(paths: list[Path]) -> list[list[str]]:
    """Groups of test files in one folder whose names differ only by underscores."""
    by_subject: dict[tuple[Path, str], list[str]] = defaultdict(list)
    for path in paths:
        by_subject[(path.parent, path.stem.replace("_", ""))].append(str(path))
    return [names for names in by_subject.values() if len(names) > 1]


def test_the_scan_finds_each_way_of_importing_a_test_module() -> None:
    source = """
import tests.unit.test_a
import tests.clusters
from tests.integration.test_b import helper
from tests.integration import test_c, drivers
from tests.integration.conftest import Cluster
from . import test_d
from .test_e import x
from .. import conftest
from tests.integration.cluster_harness import raylet_pids
import test_f

def lazy() -> None:
    from tests.unit.test_g import y
"""
    assert imported_test_modules(source, "tests.unit") == [
        "tests.unit.test_a",
        "tests.integration.test_b",
        "tests.integration.test_c",
        "tests.integration.conftest",
        "tests.unit.test_d",
        "tests.unit.test_e",
        "tests.conftest",
        "test_f",
        "tests.unit.test_g",
    ]


def test_no_file_is_named_for_a_coverage_gap() -> None:
    named = [str(p.relative_to(ROOT)) for p in TESTS.rglob("test_coverage*.py")]
    assert named == [], f"fold these into the test files of the modules they test: {named}"


def test_no_file_under_tests_imports_a_test_module_or_a_conftest() -> None:
    files = sorted(TESTS.rglob("*.py"))
    assert len(files) > 100, "the scan sees the suite"
    offenders = {}
    for path in files:
        found = imported_test_modules(path.read_text(), package_of(path))
        if found:
            offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}, f"move what these import into a helper module under tests/: {offenders}"


def test_one_subject_has_one_test_file_in_a_folder() -> None:
    files = suite_test_files()
    assert len(files) > 100, "the scan sees the suite"
    twins = same_subject([p.relative_to(ROOT) for p in files])
    assert twins == [], f"merge the files of one subject: {twins}"


@pytest.mark.parametrize(
    ("names", "twins"),
    [
        (
            ["a/test_start_args.py", "a/test_startargs.py", "a/test_record.py"],
            [["a/test_start_args.py", "a/test_startargs.py"]],
        ),
        (["a/test_record.py", "a/test_records.py"], []),
        (["unit/test_health_proof.py", "integration/test_health_proof.py"], []),
    ],
)
def test_names_that_differ_only_by_underscores_are_one_subject(names: list[str], twins: list[list[str]]) -> None:
    assert same_subject([Path(n) for n in names]) == twins
