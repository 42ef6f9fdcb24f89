"""Neuron telemetry: sysfs memory and ECC, neuron-monitor utilisation, the
processes neuron-ls says hold each device."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from ray_accel_neuron import NeuronPlugin
from ray_accel_neuron.monitor import READINGS_KEY, MonitorStream
from ray_accel_neuron.neuron_ls import NeuronLsError
from ray_accel_neuron.telemetry import NeuronTelemetry

from ray_accel.core.samples import DeviceSample
from ray_accel.plugins.host_readings import READINGS_FILE, read_readings, readings_json
from tests.fakes.neuron_env import LS_STUB, MONITOR_STUB, executable, ls_only, tree_only
from tests.fakes.neuron_sysfs import build_tree

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "neuron"


@pytest.fixture
def stub(tmp_path: Path) -> Path:
    return executable(tmp_path / "neuron-ls", LS_STUB)


@pytest.fixture
def monitor_stub(tmp_path: Path) -> Path:
    return executable(tmp_path / "neuron-monitor", MONITOR_STUB)


def telemetry(env: dict[str, str]) -> NeuronTelemetry:
    plugin = NeuronPlugin({**env, "RAYACCEL_NEURON_MONITOR": env.get("RAYACCEL_NEURON_MONITOR", "off")})
    assert plugin.probe() is None
    assert plugin.telemetry is plugin.telemetry, "one telemetry per plugin: it may own a neuron-monitor"
    return plugin.telemetry


def by_id(samples: list[DeviceSample]) -> dict[str, DeviceSample]:
    return {s.device_id: s for s in samples}


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sysfs_memory_is_the_total_counter_summed_over_cores(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "inf2.24xlarge", device_mem_used={(3, 0): 1 << 30, (3, 1): 5 << 30})
    # `present` is only the size of the last allocation (neuron_mempool.c): never the usage.
    (tree.core_dir(3, 1) / "stats" / "memory_usage" / "device_mem" / "present").write_text("4096\n")
    samples = by_id(telemetry(tree_only(tree)).device_samples())
    assert samples["neuron:3"].memory_used_bytes == 6 << 30
    assert samples["neuron:0"].memory_used_bytes == 0
    assert samples["neuron:3"].memory_total_bytes == 32 << 30
    assert samples["neuron:3"].utilization is None  # no neuron-monitor: unknown, not 0
    assert samples["neuron:3"].power_watts is None and samples["neuron:3"].temperature_c is None


@pytest.mark.parametrize("counter", ["mem_ecc_uncorrected", "sram_ecc_uncorrected", "mem_ecc_repairable_uncorrected"])
def test_uncorrected_ecc_errors_are_counted_until_they_clear(counter: str, tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn1.2xlarge", core_metrics=False, ecc={0: {counter: 2}})
    t = telemetry(tree_only(tree))
    (s,) = t.device_samples()
    assert s.recent_events == 2
    (tree.device_dir(0) / "stats" / "hardware" / counter).write_text("0\n")  # driver reload
    (s,) = t.device_samples()
    assert s.recent_events == 0


def test_a_vanished_device_is_absent_from_the_samples(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "inf2.24xlarge", core_metrics=False)
    t = telemetry(tree_only(tree))
    os.rename(tree.device_dir(2), tmp_path / "gone")
    assert [s.device_id for s in t.device_samples()] == [f"neuron:{i}" for i in (0, 1, 3, 4, 5)]


def test_without_sysfs_or_monitor_events_are_unknown_not_none_seen(tmp_path: Path, stub: Path) -> None:
    t = telemetry(ls_only(tmp_path, stub, "trn1.32xlarge.json"))
    s = t.device_samples()[0]
    assert s.recent_events is None
    assert s.memory_used_bytes is None and s.utilization is None


def _readings(plugin: NeuronPlugin) -> Mapping[str, object]:
    """The decider's side: its health monitor's polls, until neuron-monitor has reported."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        plugin.health.poll()
        readings = plugin.health.readings()
        if readings is not None and readings[READINGS_KEY] is not None:
            return readings
        time.sleep(0.1)
    raise AssertionError("no neuron-monitor report within 15 s")


def test_neuron_monitor_gives_utilisation_memory_and_health(tmp_path: Path, stub: Path, monitor_stub: Path) -> None:
    pidfile = tmp_path / "monitor.pid"
    env = ls_only(
        tmp_path,
        stub,
        "trn2.48xlarge.json",
        RAYACCEL_NEURON_MONITOR=str(monitor_stub),
        RAYACCEL_NEURON_MONITOR_PERIOD_S="1",
        STUB_MONITOR_FIXTURE="trn2.48xlarge-user-guide.json",
        STUB_MONITOR_PIDFILE=str(pidfile),
    )
    t = telemetry(env)
    assert not pidfile.exists(), "the telemetry starts no neuron-monitor: the decider's health monitor owns it"
    plugin = NeuronPlugin(env)
    assert plugin.probe() is None and plugin.health.stream is not None
    try:
        readings = _readings(plugin)
        # Handed on as the decider writes it: through JSON.
        t.use_host_readings(json.loads(json.dumps(readings)), None)
        samples = by_id(t.device_samples())
        report = json.loads((FIXTURES / "neuron-monitor" / "trn2.48xlarge-user-guide.json").read_text())
        rt = report["neuron_runtime_data"][0]["report"]
        in_use = rt["neuroncore_counters"]["neuroncores_in_use"]
        # Device 0 holds global cores 0-3; only 0 and 1 are in use (the others idle: 0 %).
        expected = (in_use["0"]["neuroncore_utilization"] + in_use["1"]["neuroncore_utilization"]) / 4 / 100
        assert samples["neuron:0"].utilization == pytest.approx(expected)
        assert samples["neuron:1"].utilization == 0.0
        per_core = rt["memory_used"]["neuron_runtime_used_bytes"]["usage_breakdown"]["neuroncore_memory_usage"]
        assert samples["neuron:0"].memory_used_bytes == sum(sum(per_core[c].values()) for c in ("0", "1"))
        assert samples["neuron:0"].recent_events == 0  # neuron_hw_counters: device 0, no uncorrected ECC
        assert samples["neuron:1"].recent_events is None  # the report has no counters for it
        pid = report["neuron_runtime_data"][0]["pid"]
        assert t.process_device_memory([pid, 999999]) == {pid: {"neuron:0": samples["neuron:0"].memory_used_bytes}}
        # One long-lived monitor, not one per poll.
        first = int(pidfile.read_text())
        for _ in range(3):
            plugin.health.poll()
        assert int(pidfile.read_text()) == first and _alive(first)
    finally:
        assert plugin.health.stream is not None
        plugin.health.stream.close()
    deadline = time.monotonic() + 5
    while _alive(first) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(first), "neuron-monitor left running after close()"


def test_without_the_deciders_readings_the_monitor_values_are_unknown(tmp_path: Path, stub: Path) -> None:
    t = telemetry(ls_only(tmp_path, stub, "trn1.32xlarge.json"))
    readings, why = read_readings(tmp_path, time.time())
    assert readings is None and why == f"no health decider readings ({tmp_path / READINGS_FILE} does not exist)"
    t.use_host_readings(readings, why)
    s = t.device_samples()[0]
    assert s.recent_events is None and s.utilization is None and s.memory_used_bytes is None
    assert t.process_device_memory([1]) == {}


def test_the_deciders_readings_file_feeds_the_samples_while_fresh(tmp_path: Path, stub: Path) -> None:
    t = telemetry(ls_only(tmp_path, stub, "trn1.32xlarge.json"))
    report = json.loads((FIXTURES / "neuron-monitor" / "trn2.48xlarge-user-guide.json").read_text())
    report["system_data"]["neuron_hw_counters"]["neuron_devices"][0]["mem_ecc_uncorrected"] = 2
    (tmp_path / READINGS_FILE).write_text(readings_json({READINGS_KEY: report, "why": None}, 1000.0, 5.0))
    t.use_host_readings(*read_readings(tmp_path, 1010.0))
    s = by_id(t.device_samples())
    assert s["neuron:0"].recent_events == 2
    assert s["neuron:0"].utilization is not None
    # Three poll intervals and a margin later, the readings are stale: unknown, never the old values.
    t.use_host_readings(*read_readings(tmp_path, 1021.0))
    s = by_id(t.device_samples())
    assert s["neuron:0"].recent_events is None and s["neuron:0"].utilization is None
    assert "are 21s old" in str(read_readings(tmp_path, 1021.0)[1])
    # A decider whose neuron-monitor has no report says why.
    (tmp_path / READINGS_FILE).write_text(readings_json({READINGS_KEY: None, "why": "waiting"}, 1000.0, 5.0))
    t.use_host_readings(*read_readings(tmp_path, 1001.0))
    assert t.device_samples()[0].recent_events is None
    (tmp_path / READINGS_FILE).write_text("{")
    assert read_readings(tmp_path, 1001.0)[0] is None and "is not valid JSON" in str(read_readings(tmp_path, 1.0)[1])


def test_a_monitor_that_exits_is_reported_and_restarted_later(tmp_path: Path, monitor_stub: Path) -> None:
    now = [1000.0]
    stream = MonitorStream(
        str(monitor_stub),
        1,
        {**os.environ, "STUB_MONITOR_EXIT": "1", "STUB_MONITOR_FIXTURE": "trn1.2xlarge-no-runtime.json"},
        clock=lambda: now[0],
    )
    try:
        report, why = stream.latest()
        first = stream.pid
        deadline = time.monotonic() + 10
        while report is None and time.monotonic() < deadline:
            time.sleep(0.05)
            report, why = stream.latest()
        assert report is not None and report.core_utilization == {}  # no runtime attached
        assert stream.pid == first
        now[0] += 10  # the report is stale and the tool has exited
        deadline = time.monotonic() + 10
        while "exited with 1" not in str(why) and time.monotonic() < deadline:
            time.sleep(0.05)
            report, why = stream.latest()
        assert report is None and why == f"{monitor_stub} exited with 1"
        now[0] += 61
        stream.latest()
        assert stream.pid is not None and stream.pid != first
    finally:
        stream.close()


def test_device_holders_lists_neuron_ls_processes_per_device(tmp_path: Path, stub: Path) -> None:
    t = telemetry(ls_only(tmp_path, stub, "trn1.32xlarge-processes.json"))
    holders = t.device_holders()
    fixture = json.loads((FIXTURES / "neuron-ls" / "trn1.32xlarge-processes.json").read_text())
    assert holders == {
        f"neuron:{e['neuron_device']}": tuple(sorted({p["pid"] for p in e["neuron_processes"]})) for e in fixture
    }
    assert holders["neuron:0"] == (23518, 23764) and holders["neuron:2"] == ()


def test_device_holders_raise_when_neuron_ls_is_unavailable(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn1.2xlarge", core_metrics=False)
    t = telemetry(tree_only(tree))
    with pytest.raises(NeuronLsError, match="neuron-ls not found"):
        t.device_holders()


def test_an_exporter_samples_the_deciders_readings_and_starts_no_neuron_monitor(
    tmp_path: Path, stub: Path, monitor_stub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real exporter on the Neuron backend: with a neuron-monitor it
    could start, it starts none; its samples take the decider's readings,
    and without them say the counters are unknown, never zero."""

    from ray_accel.metrics.export import ExporterEntry, PartitionExporter
    from ray_accel.plugins import discovery
    from tests.exporter_worker import as_exporter_worker

    pidfile = tmp_path / "monitor.pid"
    env = ls_only(
        tmp_path,
        stub,
        "trn1.32xlarge.json",
        RAYACCEL_NEURON_MONITOR=str(monitor_stub),
        STUB_MONITOR_PIDFILE=str(pidfile),
        **{discovery.SPEC_ENV: '[{"backend": "neuron"}]'},
    )
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    as_exporter_worker(monkeypatch, "node-a")
    discovery.process_backend.cache_clear()
    try:
        exporter = PartitionExporter(ExporterEntry("p0", "node-a", ("neuron:0",)), False, 3600.0, str(tmp_path))
        (dev,) = exporter.snapshot()["devices"]
        assert dev["recent_events"] is None and dev["utilization"] is None
        report = json.loads((FIXTURES / "neuron-monitor" / "trn2.48xlarge-user-guide.json").read_text())
        report["system_data"]["neuron_hw_counters"]["neuron_devices"][0]["sram_ecc_uncorrected"] = 1
        (tmp_path / READINGS_FILE).write_text(readings_json({READINGS_KEY: report, "why": None}, time.time(), 5.0))
        exporter.sample()
        (dev,) = exporter.snapshot()["devices"]
        assert dev["recent_events"] == 1 and dev["utilization"] > 0
        assert not pidfile.exists(), "an exporter starts no neuron-monitor of its own"
    finally:
        discovery.process_backend.cache_clear()


def test_a_report_that_is_not_one_is_not_used_and_says_why(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    t = telemetry(ls_only(tmp_path, executable(tmp_path / "neuron-ls", LS_STUB), "trn1.32xlarge.json"))
    with caplog.at_level(logging.WARNING, logger="ray_accel_neuron.telemetry"):
        t.use_host_readings({READINGS_KEY: ["not", "a", "report"], "why": None}, None)
    assert "neuron-monitor readings not used: neuron-monitor printed a list, not a report object" in caplog.text
    s = t.device_samples()[0]
    assert s.utilization is None and s.memory_used_bytes is None
