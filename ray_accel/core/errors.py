"""Error types shared by every layer.

The CLI maps `InputError` to exit code 2 (the user can fix it) and every other
`RayAccelError` to exit code 1 (something failed at run time).
"""

from __future__ import annotations


class RayAccelError(Exception):
    """Base of every error ray-accel raises on purpose."""


class InputError(RayAccelError, ValueError):
    """Bad input from the user: a flag, a spec file, an environment variable."""
