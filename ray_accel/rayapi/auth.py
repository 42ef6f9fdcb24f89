"""Ray's cluster token: its generator and its in-process loader (Ray 2.60:
`ray._private.authentication.authentication_token_generator`,
`ray._raylet.AuthenticationTokenLoader` and `ray._raylet.Config`)."""

from __future__ import annotations

from ray_accel.rayapi.feature import attr, method, module

GENERATOR = "ray._private.authentication.authentication_token_generator"
RAYLET = "ray._raylet"


def generate_token() -> str:
    """A new token from Ray's own generator."""
    return str(attr(module(GENERATOR), "generate_new_authentication_token", GENERATOR)())


def reload_token_config() -> None:
    """Make this process's Ray read its auth mode and token again: its C++
    config reads the mode once and its token loader caches (Ray's own
    `_enable_token_auth` refreshes both the same way)."""
    raylet = module(RAYLET)
    initialize = attr(attr(raylet, "Config", RAYLET), "initialize", f"{RAYLET}.Config")
    loader = attr(raylet, "AuthenticationTokenLoader", RAYLET)
    instance = attr(loader, "instance", f"{RAYLET}.AuthenticationTokenLoader")()
    reset = method(instance, "reset_cache", f"{RAYLET}.AuthenticationTokenLoader")
    initialize("")
    reset()
