"""The Neuron health rule, through its monitor on fake sysfs trees laid out
as the Neuron driver lays them out (tests/fakes/neuron_sysfs.py), poll by
poll: counted, never timed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from ray_accel_neuron import NeuronPlugin, health_rule
from ray_accel_neuron.health_monitor import NeuronHealthMonitor
from ray_accel_neuron.health_rule import NeuronObservation, NeuronReading, NeuronSettings, Node
from ray_accel_neuron.sysfs import UnhealthyComponents

from ray_accel.core.errors import InputError
from ray_accel.core.health import Health, HealthReport
from ray_accel.core.health_track import RECOVERY_POLLS_ENV
from ray_accel.core.reader import dump
from tests.badinput import badinput
from tests.fakes.neuron_env import MONITOR_STUB, executable, tree_only
from tests.fakes.neuron_sysfs import NeuronSysfs, build_tree, denied_reads

H, U, Q = Health.HEALTHY, Health.UNHEALTHY, Health.UNKNOWN


def monitor(tree: NeuronSysfs, k: int = 3) -> NeuronHealthMonitor:
    plugin = NeuronPlugin({**tree_only(tree), "RAYACCEL_NEURON_MONITOR": "off", RECOVERY_POLLS_ENV: str(k)})
    assert plugin.probe() is None
    assert plugin.health is plugin.health, "one monitor per plugin"
    return plugin.health


def states(report: HealthReport) -> list[Health]:
    return [d.state for d in report.devices]


@pytest.fixture
def trn3(tmp_path: Path) -> NeuronSysfs:
    return build_tree(tmp_path / "t", "trn3e.24xlarge", core_metrics=False)


def test_every_device_in_index_order_healthy_on_a_clean_trainium3(trn3: NeuronSysfs) -> None:
    report = monitor(trn3).poll()
    assert [d.device_id for d in report.devices] == [f"neuron:{i}" for i in range(4)]
    assert states(report) == [H] * 4 and report.events == () and report.errors == ()


@pytest.mark.parametrize("name", ["mem_ecc_uncorrected", "sram_ecc_uncorrected", "mem_ecc_repairable_uncorrected"])
def test_an_ecc_counter_is_a_baseline_first_and_its_growth_is_fatal_and_sticky(tmp_path: Path, name: str) -> None:
    tree = build_tree(tmp_path / "t", "trn1.32xlarge", core_metrics=False, ecc={2: {name: 4}})
    mon = monitor(tree)
    report = mon.poll()
    assert report.devices[2].state is H and report.events == (), "a count already there is a baseline"
    tree.set_ecc(2, name, 6)
    report = mon.poll()
    (event,) = report.events
    assert (event.device_id, event.kind, event.code, event.fatal) == ("neuron:2", "ecc", name, True)
    assert event.reason == f"{name} grew from 4 to 6"
    for _ in range(5):
        report = mon.poll()
        assert report.devices[2].state is U and report.events == ()
    assert report.devices[2].healthy_again.startswith("cleared by hand: ray-accel health clear neuron:2")
    mon.clear("neuron:2")
    assert mon.poll().devices[2].state is H
    tree.set_ecc(2, name, 0)  # a device reset: counts start again, a new baseline
    assert mon.poll().devices[2].state is H
    tree.set_ecc(2, name, 1)
    assert mon.poll().devices[2].state is U


def test_components_set_then_cleared_for_k_polls_recover(trn3: NeuronSysfs) -> None:
    mon = monitor(trn3, k=3)
    mon.poll()
    trn3.set_unhealthy(1, "hbm,link_efa")
    report = mon.poll()
    (event,) = report.events
    assert (event.kind, event.code, event.reason) == (
        "components",
        "hbm,link_efa",
        "unhealthy components: hbm, link_efa",
    )
    assert states(report) == [H, U, H, H]
    assert mon.poll().events == (), "the same components are not news"
    trn3.set_unhealthy(1, "")
    seen = [mon.poll().devices[1] for _ in range(3)]
    assert [d.state for d in seen] == [U, U, H], "healthy on the 3rd empty reading"
    assert seen[0].healthy_again == "no unhealthy component for 3 polls in a row (1 so far)"


def test_device_unreachable_is_fatal_and_a_changed_list_is_news(trn3: NeuronSysfs) -> None:
    mon = monitor(trn3)
    trn3.set_unhealthy(0, "device_unreachable")
    (event,) = mon.poll().events
    assert (event.kind, event.code, event.fatal) == ("unreachable", "device_unreachable", True)
    trn3.set_unhealthy(0, "hbm,made_up_part")
    (event,) = mon.poll().events
    assert event.reason == "unhealthy components: hbm, made_up_part (made_up_part not in the driver 2.30 table)"


def test_unreadable_polls_do_not_count_toward_recovery(trn3: NeuronSysfs) -> None:
    mon = monitor(trn3, k=2)
    trn3.set_unhealthy(3, "sram")
    mon.poll()
    trn3.set_unhealthy(3, "")
    assert "(1 so far)" in mon.poll().devices[3].healthy_again
    with denied_reads([trn3.components_file(3)]):
        report = mon.poll()
    assert report.devices[3].state is U and "(1 so far)" in report.devices[3].healthy_again
    assert any("neuron:3: health_status/unhealthy_components:" in e and "permission denied" in e for e in report.errors)
    assert mon.poll().devices[3].state is H


def test_an_unreadable_node_makes_a_healthy_device_unknown(trn3: NeuronSysfs) -> None:
    mon = monitor(trn3)
    mon.poll()
    trn3.ecc_file(2, "mem_ecc_uncorrected").write_text("lots\n")
    report = mon.poll()
    assert states(report) == [H, H, Q, H]
    assert "not a counter" in report.devices[2].healthy_again


def test_a_node_read_once_then_absent_is_unreadable_not_unsupported(trn3: NeuronSysfs) -> None:
    mon = monitor(trn3)
    mon.poll()
    trn3.components_file(0).unlink()
    report = mon.poll()
    assert report.devices[0].state is Q
    assert "health_status/unhealthy_components: absent now, read before" in report.devices[0].healthy_again


def test_a_device_without_components_is_healthy_by_its_ecc_counters(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn2.48xlarge", core_metrics=False)
    report = monitor(tree).poll()
    assert states(report) == [H] * 16 and report.errors == (), "no health_status before Trainium3: not an error"


def test_a_tree_with_no_health_node_is_unknown_and_says_why(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn1.2xlarge", core_metrics=False)
    for name in ("mem_ecc_uncorrected", "sram_ecc_uncorrected", "mem_ecc_repairable_uncorrected"):
        tree.ecc_file(0, name).unlink()
    report = monitor(tree).poll()
    assert states(report) == [Q]
    assert "driver 2.31 moved sysfs nodes to paths not published" in report.devices[0].healthy_again


@pytest.mark.parametrize(("sysfs", "dev", "why"), [(True, False, "sysfs directory"), (False, True, "device node")])
def test_a_device_that_goes_away_is_fatal_and_healthy_after_k_polls_back(
    trn3: NeuronSysfs, sysfs: bool, dev: bool, why: str
) -> None:
    mon = monitor(trn3, k=2)
    mon.poll()
    trn3.take_away(2, sysfs=sysfs, dev=dev)
    report = mon.poll()
    (event,) = report.events
    assert (event.kind, event.fatal) == ("lost", True) and why in event.reason
    assert states(report) == [H, H, U, H]
    assert mon.poll().events == ()
    trn3.bring_back(2)
    assert [mon.poll().devices[2].state for _ in range(2)] == [U, H]


def test_growth_while_gone_is_seen_when_the_device_is_back(trn3: NeuronSysfs) -> None:
    mon = monitor(trn3, k=1)
    mon.poll()
    trn3.take_away(1)
    mon.poll()
    trn3.bring_back(1)
    trn3.set_ecc(1, "sram_ecc_uncorrected", 3)
    report = mon.poll()
    assert [e.kind for e in report.events] == ["ecc"] and report.devices[1].state is U


@badinput("unnamed")
def test_clearing_an_unknown_device_names_it(trn3: NeuronSysfs) -> None:
    with pytest.raises(InputError, match="no device 'neuron:9'"):
        monitor(trn3).clear("neuron:9")


@badinput("exit-code")
def test_a_bad_recovery_count_is_the_users_error_before_any_hardware(trn3: NeuronSysfs) -> None:
    with pytest.raises(InputError, match=f"{RECOVERY_POLLS_ENV}: '0' is below the minimum 1"):
        NeuronPlugin({**tree_only(trn3), RECOVERY_POLLS_ENV: "0"})


def test_the_rule_alone_on_values() -> None:
    state = health_rule.initial(("neuron:0",), NeuronSettings(2), 0.0)
    readings = [
        NeuronReading(
            device_id="neuron:0",
            present=True,
            ecc={"mem_ecc_uncorrected": Node(1)},
            components=Node(UnhealthyComponents(())),
        ),
        NeuronReading(
            device_id="neuron:0", present=True, ecc={"mem_ecc_uncorrected": Node(1)}, components=Node(error="denied")
        ),
        NeuronReading(device_id="neuron:0", present=None, presence_error="stat failed"),
    ]
    got = []
    for n, r in enumerate(readings, 1):
        state, report = health_rule.step(state, NeuronObservation((r,)), float(n))
        got.append(report.devices[0].state)
    assert got == [H, Q, Q]


def test_neuron_monitor_counters_stand_in_for_ecc_nodes_sysfs_lacks() -> None:
    """Chosen by feature: the monitor's count only where sysfs has no node;
    the repairable count, which only sysfs has, stays sysfs."""
    state = health_rule.initial(("neuron:0",), NeuronSettings(2), 0.0)
    sysfs_only = {"mem_ecc_repairable_uncorrected": Node(0)}
    got = []
    for n, mem in enumerate([0, 0, 3, 3], 1):
        counters = Node({"mem_ecc_uncorrected": mem, "sram_ecc_uncorrected": 0, "mem_ecc_corrected": 9})
        r = NeuronReading(device_id="neuron:0", present=True, ecc=sysfs_only, counters=counters)
        state, report = health_rule.step(state, NeuronObservation((r,)), float(n))
        got.append((report.devices[0].state, [e.reason for e in report.events]))
    assert got == [(H, []), (H, []), (U, ["neuron-monitor mem_ecc_uncorrected grew from 0 to 3"]), (U, [])]
    assert report.devices[0].source == "sysfs-and-neuron-monitor"  # the repairable count is sysfs's
    # With the node in sysfs, sysfs is the source and the monitor's count is not read.
    both = {**sysfs_only, "mem_ecc_uncorrected": Node(0), "sram_ecc_uncorrected": Node(0)}
    state = health_rule.initial(("neuron:0",), NeuronSettings(2), 0.0)
    for n, mem in enumerate([0, 7], 1):
        r = NeuronReading(device_id="neuron:0", present=True, ecc=both, counters=Node({"mem_ecc_uncorrected": mem}))
        state, report = health_rule.step(state, NeuronObservation((r,)), float(n))
    assert report.devices[0].state is H and report.events == ()
    assert report.devices[0].source == "sysfs"
    # A monitor without a fresh report is an unreadable source: unknown, never healthy.
    state = health_rule.initial(("neuron:0",), NeuronSettings(2), 0.0)
    r = NeuronReading(
        device_id="neuron:0", present=True, ecc=sysfs_only, counters=Node(error="neuron-monitor: waiting")
    )
    _, report = health_rule.step(state, NeuronObservation((r,)), 1.0)
    assert report.devices[0].state is Q and "mem_ecc_uncorrected: neuron-monitor: waiting" in report.errors[0]


def test_a_tree_without_ecc_nodes_is_judged_by_the_hosts_neuron_monitor(tmp_path: Path) -> None:
    """The fake neuron-monitor's mem_ecc_uncorrected grows for device 3 only:
    that device goes unhealthy, with its source named in `health --json`."""
    tree = build_tree(tmp_path / "t", "trn1.32xlarge", core_metrics=False)
    for i in range(16):
        for name in ("mem_ecc_uncorrected", "sram_ecc_uncorrected", "mem_ecc_repairable_uncorrected"):
            tree.ecc_file(i, name).unlink()
    env = {
        **tree_only(tree),
        "RAYACCEL_NEURON_MONITOR": str(executable(tmp_path / "neuron-monitor", MONITOR_STUB)),
        "RAYACCEL_NEURON_MONITOR_PERIOD_S": "1",
        "STUB_MONITOR_DEVICES": "16",
        "STUB_MONITOR_GROW": "3:mem_ecc_uncorrected",
    }
    plugin = NeuronPlugin(env)
    assert plugin.probe() is None and plugin.health.stream is not None
    try:
        report = plugin.health.poll()
        assert states(report) == [Q] * 16 and "waiting for the first report" in report.errors[0]
        deadline = time.monotonic() + 20
        while report.devices[3].state is not U and time.monotonic() < deadline:
            time.sleep(0.2)
            report = plugin.health.poll()
    finally:
        plugin.health.stream.close()
    assert states(report) == [H] * 3 + [U] + [H] * 12
    assert report.devices[3].last_event is not None and report.devices[3].last_event.code == "mem_ecc_uncorrected"
    shown = dump(report.devices[3])
    assert isinstance(shown, dict) and shown["source"] == "neuron-monitor"


def test_a_baseline_read_through_neuron_monitor_outlives_the_decider() -> None:
    """kept() -> resumed(): growth while no decider ran is still growth."""
    first = health_rule.initial(("neuron:0",), NeuronSettings(2), 0.0)
    sysfs_only = {"mem_ecc_repairable_uncorrected": Node(0)}

    def reading(mem: int) -> NeuronObservation:
        counters = Node({"mem_ecc_uncorrected": mem, "sram_ecc_uncorrected": 0})
        return NeuronObservation(
            (NeuronReading(device_id="neuron:0", present=True, ecc=sysfs_only, counters=counters),)
        )

    state, _ = health_rule.step(first, reading(1), 1.0)
    resumed = health_rule.resumed(first, health_rule.kept(state))
    assert resumed.ecc[("neuron:0", "neuron-monitor mem_ecc_uncorrected")] == 1
    _, report = health_rule.step(resumed, reading(4), 2.0)
    assert report.devices[0].state is U
    assert [e.reason for e in report.events] == ["neuron-monitor mem_ecc_uncorrected grew from 1 to 4"]


# A device missing from a poll, a neuron-monitor row without the counter,
# the recovery count from the environment, and a monitor with no
# neuron-monitor.
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
