"""What a release declares agrees with itself: the `ray` extra's range is the
bridge's list of supported Ray minors, the `serve` extra is Ray's own in that
range and the project's venv installs it, the lanes test its two ends, the four
packages name the same Pythons, each one the lanes run, and they and the
CHANGELOG carry one version."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import ray_accel
from ray_accel.rayapi.feature import SUPPORTED_RAY

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ("mock", "cuda", "neuron")


def minor(version: str) -> tuple[int, int]:
    major, minor_, *_ = version.split(".")
    return int(major), int(minor_)


def test_the_ray_extra_declares_the_supported_minors() -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["ray"]
    assert len(extra) == 1
    low, high = re.fullmatch(r"ray\[default,train\]>=([\d.]+),<([\d.]+)", extra[0]).groups()
    first, last = minor(low), minor(high)
    declared = [f"{first[0]}.{m}" for m in range(first[1], last[1])]
    assert tuple(declared) == SUPPORTED_RAY


def test_the_serve_extra_is_rays_own_in_the_same_range_and_the_venv_has_it() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    ray_extra = re.fullmatch(r"ray\[default,train\](.*)", extras["ray"][0])
    assert ray_extra is not None, extras["ray"]
    # jinja2: Serve 2.57 imports it without declaring it (pyproject.toml says so).
    assert extras["serve"] == [f"ray[serve]{ray_extra.group(1)}", "jinja2"]
    pins = re.search(r"^PINS := (.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert pins is not None
    ray_pin = re.search(r'"ray\[([a-z,]+)\]==\$\(RAY\)"', pins.group(1))
    assert ray_pin is not None and "serve" in ray_pin.group(1).split(","), pins.group(1)


def test_the_lanes_test_both_ends_of_the_range() -> None:
    pins = dict(re.findall(r"^(RAY|OLDEST_RAY) := (\S+)$", (ROOT / "Makefile").read_text(), re.M))
    assert ".".join(pins["RAY"].split(".")[:2]) == SUPPORTED_RAY[-1]
    assert ".".join(pins["OLDEST_RAY"].split(".")[:2]) == SUPPORTED_RAY[0]


def test_one_version_in_the_four_packages_and_the_changelog() -> None:
    versions = {
        tomllib.loads((ROOT / "backends" / b / "pyproject.toml").read_text())["project"]["version"] for b in BACKENDS
    }
    assert versions == {ray_accel.__version__}
    headings = re.findall(r"^## (\S+)( \(unreleased\))?$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    released = [version for version, upcoming in headings if not upcoming]
    assert released and released[0] == ray_accel.__version__, "the newest released section is this version"
    # An upcoming version's section, if any, comes first and is newer than this one.
    upcoming = [version for version, mark in headings if mark]
    assert [version for version, _ in headings[: len(upcoming)]] == upcoming

    def numbers(version: str) -> tuple[int, ...]:
        return tuple(int(n) for n in version.split("."))

    assert all(numbers(v) > numbers(ray_accel.__version__) for v in upcoming), upcoming


def python_classifiers(pyproject: Path) -> list[str]:
    """The minors ("3.11") a package's classifiers name, in their order."""
    project = tomllib.loads(pyproject.read_text())["project"]
    minors = []
    for classifier in project["classifiers"]:
        match = re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", classifier)
        if match is not None:
            minors.append(match.group(1))
    return minors


def test_the_packages_name_only_pythons_the_lanes_run() -> None:
    makefile = (ROOT / "Makefile").read_text()
    main = re.search(r"^PYTHON \?= python(3\.\d+)$", makefile, re.M)
    others = re.search(r"^OTHER_PYTHONS \?= (.+)$", makefile, re.M)
    assert main is not None and others is not None
    run = {main.group(1), *others.group(1).split()}
    pyprojects = [ROOT / "pyproject.toml", *(ROOT / "backends" / b / "pyproject.toml" for b in BACKENDS)]
    for pyproject in pyprojects:
        minors = python_classifiers(pyproject)
        requires = tomllib.loads(pyproject.read_text())["project"]["requires-python"]
        assert minors == python_classifiers(ROOT / "pyproject.toml"), pyproject
        assert requires == f">={main.group(1)}", pyproject
        assert minors[0] == main.group(1), pyproject
        assert set(minors) <= run, pyproject
