"""Mock backend: impersonates a preset accelerator node with deterministic data."""

from ray_accel_mock.plugin import MockPlugin
from ray_accel_mock.spec import PRESETS, NodeSpec, SpecError, load_spec

__all__ = ["PRESETS", "MockPlugin", "NodeSpec", "SpecError", "load_spec"]
