"""The CUDA backend's health monitor on a fake NVML, for the tests of its
health and its recovery actions: a plugin probed on a clock of its own, and
the states a report gives."""

from __future__ import annotations

from ray_accel_cuda import CudaPlugin
from ray_accel_cuda.health_monitor import CudaHealthMonitor

from ray_accel.core.health import Health, HealthReport
from tests.fakes.fake_nvml import FakeNvml


class Clock:
    def __init__(self) -> None:
        self.now = 1_764_000_000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def monitor(nv: FakeNvml, environ: dict[str, str] | None = None) -> tuple[CudaPlugin, CudaHealthMonitor]:
    plugin = CudaPlugin(nv, environ=environ or {}, wall_clock=Clock())
    assert plugin.probe() is None
    nv.discovered = True
    return plugin, plugin.health


def states(report: HealthReport) -> list[Health]:
    return [d.state for d in report.devices]
