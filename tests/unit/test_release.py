"""What a release declares agrees with itself: the `ray` extra's range is the
bridge's list of supported Ray minors, the lanes test its two ends, and the
four packages and the CHANGELOG carry one version."""

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


def test_the_lanes_test_both_ends_of_the_range() -> None:
    pins = dict(re.findall(r"^(RAY|OLDEST_RAY) := (\S+)$", (ROOT / "Makefile").read_text(), re.M))
    assert ".".join(pins["RAY"].split(".")[:2]) == SUPPORTED_RAY[-1]
    assert ".".join(pins["OLDEST_RAY"].split(".")[:2]) == SUPPORTED_RAY[0]


def test_one_version_in_the_four_packages_and_the_changelog() -> None:
    versions = {
        tomllib.loads((ROOT / "backends" / b / "pyproject.toml").read_text())["project"]["version"] for b in BACKENDS
    }
    assert versions == {ray_accel.__version__}
    # The newest released section names the version; an upcoming one ("## 0.4.0 (unreleased)") may sit above it.
    headings = re.findall(r"^## (\S+)( \(unreleased\))?$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    released = [version for version, upcoming in headings if not upcoming]
    assert released and released[0] == ray_accel.__version__
