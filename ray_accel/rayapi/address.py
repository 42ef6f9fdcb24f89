"""Where a driver finds "the current cluster" (Ray 2.60:
`ray._private.services.canonicalize_bootstrap_address`,
`ray._common.utils.get_ray_address_file`)."""

from __future__ import annotations

from ray_accel.rayapi.feature import attr, module

SERVICES = "ray._private.services"
COMMON = "ray._common.utils"


def bootstrap_address(address: str | None, temp_dir: str | None) -> str | None:
    """The GCS address `ray.init(address=...)` would join, by Ray's own rule;
    None when it would start a new local cluster. Raises what Ray raises for
    an address it refuses."""
    canonical = attr(module(SERVICES), "canonicalize_bootstrap_address", SERVICES)
    found = canonical(address, temp_dir)
    return None if found is None else str(found)


def address_file(temp_dir: str | None) -> str:
    """Ray's "current cluster" file (what `ray start --head` writes and a
    plain `ray.init()` reads)."""
    return str(attr(module(COMMON), "get_ray_address_file", COMMON)(temp_dir))
