"""Collection over a plugin and psutil: failures are reported, never raised."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from ray_accel_mock import MockPlugin, load_spec

from ray_accel.devices import Device
from ray_accel.metrics import children_map, collect, descendants, device_readings
from ray_accel.samples import DeviceSample


class Flaky(MockPlugin):
    def __init__(self, mode: str) -> None:
        super().__init__(load_spec("p5.48xlarge"))
        self.mode = mode

    def gather_node_metrics(self) -> list[DeviceSample]:
        if self.mode == "raise":
            raise OSError("NVML went away")
        samples = super().gather_node_metrics()
        return samples[1:] if self.mode == "lose-first" else samples


def _devices(plugin: MockPlugin) -> tuple[Device, ...]:
    return plugin.list_devices()


def test_readings_cover_exactly_the_partition() -> None:
    plugin = MockPlugin(load_spec("p5.48xlarge"))
    mine = _devices(plugin)[:4]
    readings, errors = device_readings(plugin, mine, "p0", "H100")
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
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess,time; subprocess.Popen(['sleep','30']); time.sleep(30)"]
    )
    try:
        root = psutil.Process(parent.pid)
        for _ in range(100):
            if root.children():
                break
            psutil.wait_procs([], timeout=0.05)
        plugin = MockPlugin(load_spec("trn1.32xlarge"))
        snap = collect(plugin, _devices(plugin), "p1", "Trainium", [root])
        (w,) = snap.workloads
        assert w.pid == parent.pid and len(w.processes) == 2 and w.partition == "p1"
        assert w.rss_bytes > 0
        assert {p.pid for p in descendants(parent.pid, children_map())} == {
            c.pid for c in root.children(recursive=True)
        }
    finally:
        for c in psutil.Process(parent.pid).children(recursive=True):
            c.kill()
        parent.kill()
        parent.wait()


def test_a_workload_that_ends_mid_collection_is_skipped() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    handle = psutil.Process(proc.pid)  # taken while it runs, as ray_workers does
    proc.kill()
    proc.wait()
    plugin = MockPlugin(load_spec("trn1.2xlarge"))
    snap = collect(plugin, _devices(plugin), "p0", None, [handle, psutil.Process(os.getpid())])
    assert [w.pid for w in snap.workloads] == [os.getpid()], "the ended one is skipped, the other still read"


def test_agent_workload_metrics_sum_the_process_tree_on_its_own_devices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray_accel.bridge import publish_mask

    monkeypatch.setenv("RAYACCEL_MASK_DIR", str(tmp_path))
    plugin = MockPlugin(load_spec("trn1.32xlarge"))
    publish_mask("0,1,2")  # this process holds cores 0-2: devices neuron:0 (2 cores) and neuron:1 (1 core)
    mine = plugin.create_agent_context(["neuron:0"], "p0")
    sample = mine.gather_workload_metrics(f"python[{os.getpid()}]")
    assert sample.device_memory_bytes == {"neuron:0": 2 * 64 * 1024**2}, "only the agent's own device"
    other = plugin.create_agent_context(["neuron:1", "neuron:2"], "p1")
    assert other.gather_workload_metrics(str(os.getpid())).device_memory_bytes == {"neuron:1": 64 * 1024**2}
    assert mine.gather_workload_metrics("999999999").device_memory_bytes == {}
