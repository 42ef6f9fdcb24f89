"""ray-accel: accelerator discovery, partitioning and training for Ray."""

from ray_accel.errors import InputError, RayAccelError

__version__ = "0.1.0"

__all__ = ["InputError", "RayAccelError", "__version__"]
