"""The mock DevicePlugin: a preset or TOML host, presented as Neuron or GPU."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

from ray_accel_cuda import runtime as cuda
from ray_accel_cuda.repair import GpuState, repair_gpu
from ray_accel_cuda.visible import parse_cuda_visible
from ray_accel_neuron import runtime as neuron
from ray_accel_neuron.repair import operator_repair

from ray_accel.core.checks import CheckResult, RepairOutcome, RepairResult
from ray_accel.core.devices import Device, HostInfo, all_core_ids
from ray_accel.core.visibility import format_visible_ids
from ray_accel.plugins.check_runner import check_timeout, child_command, find_device, run_check_child
from ray_accel.plugins.discovery import MOCK_ENV
from ray_accel.plugins.interface import DevicePlugin, Runtime
from ray_accel.plugins.runtime import GLOO
from ray_accel.plugins.traits import DeviceTraits
from ray_accel_mock.faults import FAULTS_ENV, REPAIRS_FILE, Faults, load_faults
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

    def _faults(self) -> tuple[str | None, Faults]:
        path = os.environ.get(FAULTS_ENV)
        return path, load_faults(path, [d.id for d in self.spec.devices], self.family)

    def check(self, device_id: str, timeout_s: float) -> CheckResult:
        """The outcome the fault file's `checks` give the device (passed where
        not listed), reported by a check child that sees the device alone and
        takes the entry's `delay_s`. A fault file that does not fit is a
        `FaultFileError` naming the field."""
        device = find_device(self.spec.devices, device_id)
        limit = check_timeout(timeout_s)
        _, faults = self._faults()
        spec = faults.check_of(device_id)
        listed = device_id in faults.checks
        detail = (
            spec.detail or f"mock check: {spec.outcome.value} ({'fault file' if listed else 'not in the fault file'})"
        )
        # As the family's check masks it: a GPU by its UUID, a Neuron device by its cores' range.
        visible = format_visible_ids(device.core_ids, "ranges") if self.family == neuron.FAMILY else device.id
        return run_check_child(
            device_id=device_id,
            command=child_command("ray_accel_mock.check", spec.outcome.value, repr(spec.delay_s), detail),
            visible_env=self.visible_ids_env,
            visible_value=visible,
            timeout_s=limit,
            extra_env=self.process_env(),
        )

    def repair(self, device_id: str) -> RepairResult:
        """As the family impersonated repairs: a Neuron preset's repair is the
        operator's; a GPU preset follows its recovery action in the fault file
        by the CUDA backend's plan, and a reset appends a line to
        `repairs.jsonl` beside the fault file (device, time, action, outcome)
        with the outcome the file's `repairs` give it (ok where not listed)."""
        find_device(self.spec.devices, device_id)
        if self.family == neuron.FAMILY:
            return operator_repair(device_id)
        faults_path = os.environ.get(FAULTS_ENV)

        def read() -> GpuState:
            _, faults = self._faults()
            action = faults.recovery_of(device_id)
            if action is None:
                return GpuState(None, "the mock GPU has no recovery action in the fault file", (), False)
            return GpuState(action, f"NVML recovery action {action} (mock fault file)", (), False)

        def reset(gpu: str) -> tuple[int | None, str]:
            _, faults = self._faults()
            outcome = faults.repair_of(gpu)
            action = faults.recovery_of(gpu)
            record = {"device": gpu, "time": time.time(), "action": action, "outcome": outcome.value}
            # The read above saw a recovery action, so the fault file is set.
            log = Path(str(faults_path)).parent / REPAIRS_FILE
            with open(log, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
            code = 0 if outcome is RepairOutcome.OK else 1
            return code, f"mock reset of {gpu}: {outcome.value} (recorded in {log})"

        return repair_gpu(device_id, read, reset)
