"""The Neuron rule and monitor where the other tests do not reach: a device
missing from a poll, a neuron-monitor row without the counter, the recovery
count from the environment, and a monitor with no neuron-monitor."""

from __future__ import annotations

from pathlib import Path

from ray_accel_neuron import health_rule
from ray_accel_neuron.health_rule import NeuronObservation, NeuronReading, NeuronSettings, Node

from ray_accel.core.health import Health
from ray_accel.core.health_track import RECOVERY_POLLS_ENV
from tests.fakes.neuron_sysfs import build_tree
from tests.unit.test_neuron_health import monitor


def test_a_device_missing_from_a_poll_is_unknown_not_healthy() -> None:
    state = health_rule.initial(("neuron:0", "neuron:1"), NeuronSettings(2), 0.0)
    read = NeuronReading(device_id="neuron:0", present=True, ecc={"mem_ecc_uncorrected": Node(0)})
    _, report = health_rule.step(state, NeuronObservation((read,)), 1.0)
    assert [d.state for d in report.devices] == [Health.HEALTHY, Health.UNKNOWN]
    assert "not read this poll" in report.devices[1].healthy_again


def test_a_neuron_monitor_row_without_the_counter_makes_the_device_unknown_naming_it() -> None:
    state = health_rule.initial(("neuron:0",), NeuronSettings(2), 0.0)
    sysfs_only = {"mem_ecc_repairable_uncorrected": Node(0)}
    read = NeuronReading(device_id="neuron:0", present=True, ecc=sysfs_only, counters=Node({"sram_ecc_uncorrected": 0}))
    _, report = health_rule.step(state, NeuronObservation((read,)), 1.0)
    assert report.devices[0].state is Health.UNKNOWN
    assert any("its neuron_hw_counters row has no mem_ecc_uncorrected" in e for e in report.errors)


def test_the_recovery_count_is_read_from_the_environment() -> None:
    assert NeuronSettings.from_environ({RECOVERY_POLLS_ENV: "5"}) == NeuronSettings(5)
    assert NeuronSettings.from_environ({}) == NeuronSettings()


def test_without_neuron_monitor_the_decider_is_handed_no_readings(tmp_path: Path) -> None:
    mon = monitor(build_tree(tmp_path / "t", "trn1.2xlarge"))
    assert mon.stream is None and mon.readings() is None
