"""The mock DevicePlugin: a preset or TOML host, presented as Neuron or GPU."""

from __future__ import annotations

import dataclasses
import os

from ray_accel_cuda import runtime as cuda
from ray_accel_cuda.visible import parse_cuda_visible
from ray_accel_neuron import runtime as neuron

from ray_accel.core.devices import Device, HostInfo, all_core_ids
from ray_accel.plugins.discovery import MOCK_ENV
from ray_accel.plugins.interface import DevicePlugin, Runtime
from ray_accel.plugins.runtime import GLOO
from ray_accel.plugins.traits import DeviceTraits
from ray_accel_mock.faults import FAULTS_ENV
from ray_accel_mock.health import MockHealthMonitor
from ray_accel_mock.spec import HostSpec, load_spec
from ray_accel_mock.telemetry import MockTelemetry

__all__ = ["FAULTS_ENV", "MockHealthMonitor", "MockPlugin"]

# What each family it impersonates is to Ray: its resource name and visibility variable.
RESOURCES = {neuron.FAMILY: ("neuron_cores", neuron.VISIBLE_ENV)}
GPU_RESOURCE = ("GPU", cuda.VISIBLE_ENV)


class MockPlugin(DevicePlugin):
    """Impersonates the family of its spec, so Ray sees `neuron_cores` or `GPU`."""

    name = "mock"
    # Whichever family it impersonates, with that family's own declarations.
    collectives = (*neuron.COLLECTIVES, *cuda.COLLECTIVES)
    protected_env = neuron.PROTECTED_ENV | cuda.PROTECTED_ENV

    def __init__(self, spec: HostSpec | None = None) -> None:
        self._spec = spec
        self._env_value = os.environ.get(MOCK_ENV, "")
        self._health: MockHealthMonitor | None = None

    @property
    def spec(self) -> HostSpec:
        if self._spec is None:
            self._spec = load_spec(self._env_value)
        return self._spec

    @property
    def family(self) -> str:
        return self.spec.family

    @property
    def resource_name(self) -> str:
        return RESOURCES.get(self.family, GPU_RESOURCE)[0]

    @property
    def visible_ids_env(self) -> str:
        return RESOURCES.get(self.family, GPU_RESOURCE)[1]

    @property
    def traits(self) -> DeviceTraits:
        # The impersonated family's traits, and its telemetry reads the masks
        # workers publish (they stand for the vendor tools' process reports).
        own = neuron.TRAITS if self.family == neuron.FAMILY else cuda.TRAITS
        return dataclasses.replace(own, reads_published_masks=True)

    def probe(self) -> str | None:
        if self._spec is None and not self._env_value:
            return f"{MOCK_ENV} is not set"
        self.spec  # noqa: B018 - loading validates the spec; a bad one raises
        return None

    def list_devices(self) -> tuple[Device, ...]:
        return self.spec.devices

    def parse_visible(self, value: str | None) -> list[int] | None:
        # A GPU host reads CUDA_VISIBLE_DEVICES as the CUDA backend does (ids,
        # UUIDs or their unique prefixes, NoDevFiles), so a Slurm-style UUID
        # mask on a mock p4d means what it would on a real one.
        if self.family != neuron.FAMILY:
            return parse_cuda_visible(value, self.spec.devices)
        return super().parse_visible(value)

    def host_info(self) -> HostInfo:
        devices = self.spec.devices
        return HostInfo(
            plugin=self.name,
            family=self.family,
            accelerator_type=self.spec.accelerator_type,
            resource_name=self.resource_name,
            visible_ids_env=self.visible_ids_env,
            device_count=len(devices),
            core_count=len(all_core_ids(devices)),
            instance_type=self.spec.instance_type,
            driver_version="mock",
            runtime_version="mock",
            attributes={"preset": self.spec.name},
        )

    def process_env(self) -> dict[str, str]:
        # As the backend it impersonates: GPU masks are NVML (PCI bus) indexes.
        return {} if self.family == neuron.FAMILY else dict(cuda.PROCESS_ENV)

    @property
    def runtime(self) -> Runtime:
        # The real runtime of the family impersonated, so training on the mock
        # exercises the same visibility rules; but on the CPU: gloo, PJRT CPU.
        # A Neuron preset picks `neuron` under "auto" where TorchNeuron is in
        # the worker and supports the preset's generation, as on the hardware
        # (tests give the workers a fake of it that runs on the CPU).
        if self.family == neuron.FAMILY:
            return neuron.NeuronRuntime(pjrt_device=neuron.PJRT_CPU, fallback=GLOO)
        return cuda.CudaRuntime(collective=GLOO)

    @property
    def telemetry(self) -> MockTelemetry:
        return MockTelemetry(self.spec)

    @property
    def health(self) -> MockHealthMonitor:
        # One per plugin: it keeps the rule's state and the fault entries it took.
        if self._health is None:
            self._health = MockHealthMonitor(self.spec)
        return self._health
