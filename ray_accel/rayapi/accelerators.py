"""Ray's accelerator registry and the visible-ids globals of a worker
(Ray 2.60: `ray._private.accelerators`, `ray._private.utils`,
`ray._private.worker.global_worker`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ray_accel.rayapi.feature import attr, missing, module

REGISTRY = "ray._private.accelerators"
MANAGER_BASE = "ray._private.accelerators.accelerator"
# The function-attribute cache Ray's lookup keeps (name -> manager class).
LOOKUP_CACHE = "_resource_name_to_accelerator_manager"


def manager_base() -> type:
    """Ray's `AcceleratorManager` base class."""
    base: type = attr(module(MANAGER_BASE), "AcceleratorManager", MANAGER_BASE)
    return base


def check_registry() -> None:
    """`RayApiMissing` unless the registry has both functions `put_managers` replaces."""
    registry = module(REGISTRY)
    for name in ("get_all_accelerator_managers", "get_accelerator_manager_for_resource"):
        if not callable(attr(registry, name, REGISTRY)):
            raise missing(f"{REGISTRY}.{name} is not a function")


def put_managers(ours: Mapping[str, type]) -> None:
    """Make Ray's registry answer with `ours` (resource name -> manager class)
    in this process, in place of its own manager for those names; idempotent."""
    registry = module(REGISTRY)
    current = registry.get_all_accelerator_managers
    original = getattr(current, "__wrapped_ray_accel__", current)
    mine = dict(ours)

    def all_managers() -> set[Any]:
        return {m for m in original() if m.get_resource_name() not in mine} | set(mine.values())

    all_managers.__wrapped_ray_accel__ = original  # type: ignore[attr-defined]
    setattr(registry, "get_all_accelerator_managers", all_managers)  # noqa: B010 (a module attribute Ray reads)
    # Let Ray build its cached name -> manager map (with its GPU vendor probe
    # for the names we do not own), then put ours over it.
    lookup: Any = registry.get_accelerator_manager_for_resource
    if hasattr(lookup, LOOKUP_CACHE):
        delattr(lookup, LOOKUP_CACHE)
    lookup("GPU")
    cache = getattr(lookup, LOOKUP_CACHE, None)
    if not isinstance(cache, dict):
        raise missing(f"{REGISTRY}.get_accelerator_manager_for_resource keeps no {LOOKUP_CACHE} map")
    cache.update(mine)


def refresh_original_visible_ids() -> None:
    """Ray records a worker's inherited masks once, at import, with the
    managers it had then; record them again through the registry as it is now."""
    read = attr(module("ray._private.utils"), "get_visible_accelerator_ids", "ray._private.utils")
    global_worker = attr(module("ray._private.worker"), "global_worker", "ray._private.worker")
    attr(global_worker, "original_visible_accelerator_ids", "ray._private.worker.global_worker")
    global_worker.original_visible_accelerator_ids = read()
