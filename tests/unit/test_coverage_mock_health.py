"""The mock monitor where the earlier tests leave it: a fault file bad from the
start, a failed source on a GPU preset, a GPU preset's kept faults across
deciders, and a Neuron device the driver cannot reach."""

from __future__ import annotations

from pathlib import Path

from ray_accel_mock.faults import FaultEvent
from ray_accel_mock.health import MockHealthMonitor, current_components
from ray_accel_neuron.sysfs import UnhealthyComponents

from ray_accel.core.health import Health
from tests.unit.test_mock_health import Host, states

H, U, Q = Health.HEALTHY, Health.UNHEALTHY, Health.UNKNOWN
ECC = "mem_ecc_uncorrected"


def test_an_unreachable_device_reads_as_unreachable_unless_components_are_named() -> None:
    unreachable = FaultEvent("neuron:1", "components", " device_unreachable ")
    named = FaultEvent("neuron:1", "components", "hbm,sram")
    other = FaultEvent("neuron:2", "components", "nc0")
    assert current_components((unreachable, other), "neuron:1") == UnhealthyComponents((), True)
    assert current_components((unreachable, named, named), "neuron:1") == UnhealthyComponents(("hbm", "sram"))
    assert current_components((other,), "neuron:1").healthy


def test_a_fault_file_bad_when_the_monitor_starts_gives_no_counter_baseline(tmp_path: Path) -> None:
    faults = tmp_path / "faults.json"
    faults.write_text("{not json")
    host = Host(tmp_path, "trn1.32xlarge", k=1)
    assert states(host.poll()) == [Q] * 16
    host.set(counters={"neuron:3": {ECC: 2}})
    report = host.poll()
    assert report.devices[3].state is U and report.events[0].reason == f"{ECC} grew from 0 to 2"


def test_a_failed_or_unreadable_source_on_a_gpu_preset_makes_every_gpu_unknown(tmp_path: Path) -> None:
    host = Host(tmp_path, "p4d.24xlarge")
    host.set(fail=True)
    report = host.poll()
    assert states(report) == [Q] * 8
    assert f"{host.ids[0]}: presence: mock health source failed (injected)" in report.errors
    host.faults.write_text("[]")
    report = host.poll()
    assert states(report) == [Q] * 8 and any(str(host.faults) in e for e in report.errors)


def test_a_gpu_presets_sticky_fault_is_kept_for_the_next_monitor_and_cleared_by_hand(tmp_path: Path) -> None:
    host = Host(tmp_path, "p4d.24xlarge")
    gpu = host.ids[2]
    host.set(events=[{"device": gpu, "kind": "xid", "code": 79}])
    assert host.poll().devices[2].state is U
    kept = host.monitor.kept()
    assert [k.device_id for k in kept if k.faults] == [gpu]
    host.set()
    later = MockHealthMonitor(host.spec, host.environ)
    later.resume(kept)
    assert later.poll().devices[2].state is U, "an XID 79 stays until cleared, across deciders"
    later.clear(gpu)
    assert later.poll().devices[2].state is H
