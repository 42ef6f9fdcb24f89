"""Collection over a plugin and psutil: failures are reported, never raised."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from ray_accel_mock import load_spec
from ray_accel_mock.plugin import MockTelemetry

from ray_accel.core import masks
from ray_accel.core.devices import Device
from ray_accel.core.processes import children_map, descendants, snapshot
from ray_accel.core.samples import DeviceSample
from ray_accel.metrics.collect import device_readings, workload_readings


class Flaky(MockTelemetry):
    def __init__(self, mode: str) -> None:
        super().__init__(load_spec("p5.48xlarge"))
        self.mode = mode

    def device_samples(self) -> list[DeviceSample]:
        if self.mode == "raise":
            raise OSError("NVML went away")
        samples = super().device_samples()
        return samples[1:] if self.mode == "lose-first" else samples


def _devices(telemetry: MockTelemetry) -> tuple[Device, ...]:
    return telemetry.spec.devices


def test_readings_cover_exactly_the_partition() -> None:
    telemetry = MockTelemetry(load_spec("p5.48xlarge"))
    mine = _devices(telemetry)[:4]
    readings, errors = device_readings(telemetry, mine, "p0", "H100")
    assert [r.id for r in readings] == [d.id for d in mine]
    assert all(r.partition == "p0" and r.healthy for r in readings) and errors == []


def test_a_failing_source_marks_every_device_unknown() -> None:
    plugin = Flaky("raise")
    readings, errors = device_readings(plugin, _devices(plugin), "p0", "H100")
    assert all(r.healthy is None and "metric source failed: OSError: NVML went away" == r.reason for r in readings)
    assert errors == ["metric source failed: OSError: NVML went away"]


def test_a_vanished_device_is_reported_and_the_rest_collected() -> None:
    plugin = Flaky("lose-first")
    devices = _devices(plugin)
    readings, errors = device_readings(plugin, devices, "p0", "H100")
    assert readings[0].healthy is False and readings[0].reason == "device disappeared"
    assert all(r.healthy for r in readings[1:])
    assert errors == [f"device {devices[0].id} disappeared"]


def test_workloads_cover_the_process_tree() -> None:
    code = "import subprocess,time; subprocess.Popen(['sleep','30']); time.sleep(30)"
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        root = psutil.Process(parent.pid)
        for _ in range(100):
            if root.children():
                break
            time.sleep(0.05)
        telemetry = MockTelemetry(load_spec("trn1.32xlarge"))
        (w,) = workload_readings(telemetry, [parent.pid], "p1", {d.id for d in _devices(telemetry)})
        assert w.pid == parent.pid and len(w.processes) == 2 and w.partition == "p1"
        assert w.rss_bytes > 0 and w.workload.endswith(f"[{parent.pid}]")
        table = snapshot()
        assert set(descendants(parent.pid, children_map(table.values()))) == {
            c.pid for c in root.children(recursive=True)
        }, "one pass over /proc finds what psutil's recursive walk finds"
    finally:
        for c in psutil.Process(parent.pid).children(recursive=True):
            c.kill()
        parent.kill()
        parent.wait()


def test_a_workload_that_ends_before_collection_is_skipped() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    proc.kill()
    proc.wait()
    telemetry = MockTelemetry(load_spec("trn1.2xlarge"))
    readings = workload_readings(telemetry, [proc.pid, os.getpid()], "p0", set())
    assert [w.pid for w in readings] == [os.getpid()], "the ended one is skipped, the other still read"


def test_process_device_memory_is_on_the_partitions_own_devices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAYACCEL_MASK_DIR", str(tmp_path))
    telemetry = MockTelemetry(load_spec("trn1.32xlarge"))
    masks.publish("0,1,2")  # this process holds cores 0-2: neuron:0 (2 cores) and neuron:1 (1 core)
    (mine,) = workload_readings(telemetry, [os.getpid()], "p0", {"neuron:0"})
    assert mine.device_memory_bytes == {"neuron:0": 2 * 64 * 1024**2}, "only the partition's own device"
    (other,) = workload_readings(telemetry, [os.getpid()], "p1", {"neuron:1", "neuron:2"})
    assert other.device_memory_bytes == {"neuron:1": 64 * 1024**2}
