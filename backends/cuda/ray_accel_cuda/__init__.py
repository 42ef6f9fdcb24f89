"""ray-accel backend for NVIDIA GPUs, through NVML."""

from ray_accel_cuda.nvml import NA, Nvml
from ray_accel_cuda.plugin import CudaPlugin

__all__ = ["NA", "CudaPlugin", "Nvml"]
