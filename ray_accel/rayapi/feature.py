"""Finding a part of Ray's private API by feature (a module, an attribute, a
signature that accepts what we pass), never by version string, and the one
error its absence raises."""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import os
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from ray_accel.core.errors import RayAccelError

# TEST ONLY: a Ray version to report in place of the installed one, so tests
# can drive the untested-version fallbacks on the Ray they have. Never set it
# in production: it does not change which Ray runs.
FAKE_RAY_VERSION_ENV = "RAYACCEL_TEST_FAKE_RAY_VERSION"
# The Ray minors ray-accel supports, oldest first: the `ray` extra's range in
# pyproject.toml (a test holds the two equal) and what the bridge accepts.
# Every private part reached here is found by feature in each of them; the
# main lanes test the newest, a CI lane of its own the oldest.
SUPPORTED_RAY = ("2.57", "2.58", "2.59", "2.60")


class RayApiMissing(RayAccelError):
    """A part of Ray's private API ray-accel uses is not in the running Ray."""


def ray_version() -> str:
    """The running Ray's version ("not installed" without Ray)."""
    try:
        return os.environ.get(FAKE_RAY_VERSION_ENV) or importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def missing(what: str) -> RayApiMissing:
    return RayApiMissing(f"Ray {ray_version()}: {what}")


def module(name: str) -> ModuleType:
    """The module `name`, or `RayApiMissing` naming it."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise missing(f"has no module {name} ({e})") from None


def attr(owner: Any, name: str, where: str) -> Any:
    """`owner.name`, or `RayApiMissing` saying `where` has no `name`."""
    try:
        return getattr(owner, name)
    except AttributeError:
        raise missing(f"{where} has no {name}") from None


def method(owner: Any, name: str, where: str) -> Any:
    """`owner.name`, a callable, or `RayApiMissing` saying what it is not."""
    fn = attr(owner, name, where)
    if not callable(fn):
        raise missing(f"{where}.{name} is not callable")
    return fn


def require_params(fn: Any, params: Sequence[str], where: str) -> None:
    """Raise `RayApiMissing` unless `fn` accepts every keyword in `params`. A
    callable whose signature Python cannot read is taken as it is (unknown is
    not wrong: calling it will say what it refuses)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    kinds = {n: p.kind for n, p in sig.parameters.items()}
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    absent = [p for p in params if kinds.get(p) not in keyword]
    if absent and inspect.Parameter.VAR_KEYWORD not in kinds.values():
        raise missing(f"{where} takes no {', '.join(absent)} (its signature: {sig})")
