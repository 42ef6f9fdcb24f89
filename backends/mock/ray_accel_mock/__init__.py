"""Mock backend: impersonates a preset accelerator host with deterministic data."""

from ray_accel_mock.plugin import MockPlugin
from ray_accel_mock.spec import PRESETS, HostSpec, SpecError, load_spec

__all__ = ["PRESETS", "HostSpec", "MockPlugin", "SpecError", "load_spec"]
