"""ray-accel: accelerator discovery, partitioning and training for Ray."""

from ray_accel.errors import InputError, RayAccelError

__version__ = "0.1.0"

__all__ = ["InputError", "RayAccelError", "__version__", "init"]


def __getattr__(name: str) -> object:
    # `ray_accel.init` imports Ray; keep `import ray_accel` light for the CLI.
    if name == "init":
        from ray_accel.local import init

        return init
    raise AttributeError(f"module 'ray_accel' has no attribute {name!r}")
