"""The CUDA DevicePlugin: NVIDIA GPUs through NVML, keyed by UUID.

Discovery only; each concern has its own module: `enumeration` (GPUs as
devices), `topology` (NVLink peers), `health` (XIDs, ECC), `health_rule`
(what is fatal, what makes a GPU healthy again; pure), `health_monitor`
(the rule over NVML, poll by poll), `telemetry` (samples, process memory,
holders), `visible` (CUDA_VISIBLE_DEVICES), `runtime` (what a training
worker needs).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from ray_accel.core.checks import CheckResult, RepairResult
from ray_accel.core.devices import Device, HostInfo
from ray_accel.plugins.check_runner import child_command, find_device, run_check_child
from ray_accel.plugins.interface import DevicePlugin
from ray_accel_cuda.enumeration import enumerate_gpus, inconsistency
from ray_accel_cuda.health_monitor import CudaHealthMonitor
from ray_accel_cuda.health_rule import CudaSettings
from ray_accel_cuda.nvml import NA, Nvml, NvmlUnavailable, text
from ray_accel_cuda.repair import repair_with_nvml
from ray_accel_cuda.runtime import COLLECTIVES, FAMILY, PROCESS_ENV, PROTECTED_ENV, TRAITS, CudaRuntime
from ray_accel_cuda.telemetry import CudaTelemetry
from ray_accel_cuda.topology import nvlink_peers, with_peers
from ray_accel_cuda.visible import ENV, parse_cuda_visible


class CudaPlugin(DevicePlugin):
    name = "cuda"
    resource_name = "GPU"
    visible_ids_env = ENV
    family = FAMILY
    collectives = COLLECTIVES
    protected_env = PROTECTED_ENV
    traits = TRAITS

    def __init__(
        self,
        nvml_module: Any = None,
        clock: Callable[[], float] = time.monotonic,
        environ: Mapping[str, str] | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        # The user's health settings are checked here, before any hardware is
        # touched: a bad value is an InputError naming the variable (exit 2).
        self._health_settings = CudaSettings.from_environ(os.environ if environ is None else environ)
        self.nvml = Nvml(nvml_module)
        self._clock = clock
        self._wall_clock = wall_clock
        self._health: CudaHealthMonitor | None = None
        self._devices: tuple[Device, ...] = ()
        self._handles: dict[str, Any] = {}
        self._lost: tuple[int, ...] = ()
        self._telemetry: CudaTelemetry | None = None
        self._driver: str | None = None
        self._cuda: str | None = None

    def probe(self) -> str | None:
        try:
            self.nvml.ensure()
            count = self.nvml.query("nvmlDeviceGetCount", default=0)
        except NvmlUnavailable as e:
            return str(e)
        if not count:
            return "NVML reports no NVIDIA GPU"
        self._driver = text(self.nvml.query("nvmlSystemGetDriverVersion"))
        cuda = self.nvml.query("nvmlSystemGetCudaDriverVersion")
        self._cuda = None if cuda is NA else f"{cuda // 1000}.{cuda % 1000 // 10}"
        found = enumerate_gpus(self.nvml, count)
        self._lost = found.lost
        if not found.devices:
            return f"all {count} GPUs failed to answer (lost: {list(found.lost)})"
        bad = inconsistency(found.devices)
        if bad is not None:
            return bad
        peers = nvlink_peers(self.nvml, found.devices, found.handles)
        self._devices = with_peers(found.devices, peers)
        self._handles = {d.id: h for d, h in zip(found.devices, found.handles, strict=True)}
        return None

    def list_devices(self) -> tuple[Device, ...]:
        return self._devices

    def process_env(self) -> dict[str, str]:
        return dict(PROCESS_ENV)

    @property
    def runtime(self) -> CudaRuntime:
        return CudaRuntime()

    @property
    def telemetry(self) -> CudaTelemetry:
        if self._telemetry is None:
            self._telemetry = CudaTelemetry(
                self.nvml, self._devices, self._handles, self._clock, self._health_settings.ignored_xids
            )
        return self._telemetry

    @property
    def health(self) -> CudaHealthMonitor:
        # One per plugin: it keeps the rule's state between polls.
        if self._health is None:
            self._health = CudaHealthMonitor(
                self.nvml, self._devices, self._handles, self._health_settings, self._wall_clock
            )
        return self._health

    def check(self, device_id: str, timeout_s: float) -> CheckResult:
        """The CUDA check (`ray_accel_cuda.check`) in a child that sees this GPU
        alone: CUDA_VISIBLE_DEVICES is its UUID, which no ordering can mistake."""
        find_device(self._devices, device_id)
        return run_check_child(
            device_id=device_id,
            command=child_command("ray_accel_cuda.check", device_id),
            visible_env=self.visible_ids_env,
            visible_value=device_id,
            timeout_s=timeout_s,
            extra_env=self.process_env(),
        )

    def repair(self, device_id: str) -> RepairResult:
        """What the GPU's recovery action asks (`ray_accel_cuda.repair`): a reset
        by nvidia-smi where NVML lists no process on it, else nothing run."""
        find_device(self._devices, device_id)
        return repair_with_nvml(self.nvml, device_id)

    def parse_visible(self, value: str | None) -> list[int] | None:
        """CUDA masks may name GPUs by index, by UUID (or a unique prefix), or be NoDevFiles."""
        return parse_cuda_visible(value, self._devices)

    def host_info(self) -> HostInfo:
        types = sorted({d.accelerator_type for d in self._devices if d.accelerator_type})
        attrs: dict[str, str] = {}
        if self._lost:
            attrs["lost_gpus"] = ",".join(map(str, self._lost))
        if len(types) > 1:
            # A host of several models has no one type: each partition gets its own.
            attrs["accelerator_types"] = ",".join(types)
        if self._telemetry is not None:
            attrs.update(self._telemetry.attributes())
        return HostInfo(
            plugin=self.name,
            family=self.family,
            accelerator_type=types[0] if len(types) == 1 else None,
            resource_name=self.resource_name,
            visible_ids_env=self.visible_ids_env,
            device_count=len(self._devices),
            core_count=len(self._devices),
            driver_version=self._driver,
            runtime_version=self._cuda,
            attributes=attrs,
        )
