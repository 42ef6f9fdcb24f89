"""GPU faults by the driver's recovery action, through the CUDA monitor on
the fake NVML's two drivers: one with the recovery action field (it decides,
by the installed binding's names) and one without (the XID list decides);
`source` names which did, as `ray-accel health --json` shows it."""

from __future__ import annotations

import logging

import pytest
from ray_accel_cuda import health_rule
from ray_accel_cuda.health_rule import BY_ACTION, CudaObservation, CudaSettings, GpuReading, Xid

from ray_accel.core.health import DeviceHealth, Health, HealthReport
from ray_accel.core.health_state import HealthSettings, OnUnhealthy, PartitionHealth, PartState
from ray_accel.core.health_track import RECOVERY_POLLS_ENV
from ray_accel.core.reader import dump, load
from ray_accel.health.rules import Effect, Facts, decide
from tests.cuda_monitors import monitor, states
from tests.fakes import fake_nvml
from tests.fakes.fake_nvml import RECOVERY_FIELD, FakeGpu, RecoveryNvml


def test_drain_and_reset_with_no_xid_makes_the_gpu_unhealthy_and_its_partition_drain() -> None:
    nv = fake_nvml.h100x8_recovery()
    _, mon = monitor(nv, {RECOVERY_POLLS_ENV: "2"})
    report = mon.poll()
    assert states(report) == [Health.HEALTHY] * 8
    assert {d.source for d in report.devices} == {"recovery-action"}
    fake_nvml.drain_and_reset(nv, 2)
    report = mon.poll()
    assert nv.events == [], "no XID: the driver's word alone"
    (event,) = report.events
    assert (event.kind, event.code, event.fatal) == ("recovery-action", "DRAIN_AND_RESET", True)
    assert event.reason == "NVML recovery action DRAIN_AND_RESET"
    bad = report.devices[2]
    assert bad.state is Health.UNHEALTHY and bad.source == "recovery-action"
    assert bad.healthy_again == "recovery action NONE for 2 polls in a row (0 so far)"

    full = tuple(d.device_id for d in report.devices[:4])
    view = PartitionHealth(
        partition="p0", state=PartState.SERVING, since=0.0, devices=full, out=(), node_id="ab12", detail=""
    )
    facts = Facts(full=full, raylet_alive=True, health={d.device_id: d for d in report.devices})
    step = decide(HealthSettings(action=OnUnhealthy.SHRINK, interval_s=1.0, drain_deadline_s=10.0), view, facts, 100.0)
    assert step.effect is Effect.DRAIN and step.view.out == (bad.device_id,)
    assert f"{bad.device_id}: NVML recovery action DRAIN_AND_RESET" in step.message

    # The driver clears the action once the GPU was reset: healthy after K polls of NONE.
    fake_nvml.reset_done(nv, 2)
    assert mon.poll().devices[2].state is Health.UNHEALTHY
    assert mon.poll().devices[2].state is Health.HEALTHY


def test_with_the_field_an_xid_only_counts_and_the_action_decides() -> None:
    nv = fake_nvml.h100x8_recovery()
    _, mon = monitor(nv)
    mon.poll()
    nv.events.append((1, 48))
    report = mon.poll()
    (event,) = report.events
    assert event.fatal is False and event.reason == "XID 48 (Double Bit ECC Error)" + BY_ACTION
    assert report.devices[1].state is Health.HEALTHY, "the driver says NONE"
    nv.events.append((1, 48))
    nv.gpus[1].recovery_action = "GPU_RESET"
    report = mon.poll()
    assert [(e.kind, e.code, e.fatal) for e in report.events] == [
        ("xid", "48", False),
        ("recovery-action", "GPU_RESET", True),
    ]
    assert report.devices[1].state is Health.UNHEALTHY


@pytest.mark.parametrize(
    "nv",
    [
        pytest.param(fake_nvml.a100x8_nvlink(), id="binding-without-the-field"),
        pytest.param(
            RecoveryNvml([FakeGpu(i, unsupported={RECOVERY_FIELD}) for i in range(2)]), id="driver-not-supported"
        ),
        pytest.param(RecoveryNvml([FakeGpu(i) for i in range(2)], actions={}), id="binding-without-action-names"),
        pytest.param(RecoveryNvml([FakeGpu(i) for i in range(2)], knows_field=False), id="driver-without-the-field"),
    ],
)
def test_without_the_recovery_action_the_xid_list_decides_and_is_named(nv: fake_nvml.FakeNvml) -> None:
    _, mon = monitor(nv)
    nv.events += [(0, 13), (1, 48)]
    report = mon.poll()
    assert [(e.code, e.fatal) for e in report.events] == [("13", False), ("48", True)]
    assert states(report)[:2] == [Health.HEALTHY, Health.UNHEALTHY]
    assert {d.source for d in report.devices} == {"xid"}


def test_an_action_the_binding_does_not_name_is_fatal_with_a_warning_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nv = fake_nvml.h100x8_recovery()
    _, mon = monitor(nv)
    nv.gpus[4].recovery_action = 99
    with caplog.at_level(logging.WARNING):
        report = mon.poll()
        mon.poll()
    why = "NVML recovery action 99: not one the installed NVML binding names, taken as fatal"
    (event,) = report.events
    assert (event.code, event.reason, event.fatal) == ("99", why, True)
    assert report.devices[4].state is Health.UNHEALTHY and states(report).count(Health.HEALTHY) == 7
    assert [r.getMessage() for r in caplog.records] == [f"GPU {nv.gpus[4].uuid}: {why}"], "warned of once"


def test_a_value_means_what_the_installed_binding_names_it() -> None:
    # 5 is RECOVER_IMEX_DOMAIN in nvidia-ml-py (IMEX-scoped: the GPU keeps
    # serving) and GPU_RESET_BUS in the copy Ray 2.60 bundles (fatal).
    imex = fake_nvml.h100x8_recovery()
    ray_copy = RecoveryNvml(
        [FakeGpu(i) for i in range(8)],
        actions={"NONE": 0, "GPU_RESET": 1, "NODE_REBOOT": 2, "DRAIN_P2P": 3, "DRAIN_AND_RESET": 4, "GPU_RESET_BUS": 5},
    )
    got = []
    for nv in (imex, ray_copy):
        _, mon = monitor(nv)
        nv.gpus[0].recovery_action = 5
        report = mon.poll()
        got.append((report.devices[0].state, [e.code for e in report.events]))
    assert got == [(Health.HEALTHY, []), (Health.UNHEALTHY, ["GPU_RESET_BUS"])]


def test_the_source_travels_in_the_health_file_and_an_older_file_reads_without_it() -> None:
    nv = fake_nvml.h100x8_recovery()
    _, mon = monitor(nv)
    report = mon.poll()
    data = dump(report)
    assert isinstance(data, dict) and data["devices"][0]["source"] == "recovery-action"
    assert load(HealthReport, data) == report
    older = {k: v for k, v in data["devices"][0].items() if k != "source"}
    assert load(DeviceHealth, older).source is None


def test_a_failed_read_of_the_action_leaves_the_gpu_unknown_and_the_xid_list_decides() -> None:
    state = health_rule.initial(("g0",), CudaSettings(), 0.0)
    gpu = GpuReading(device_id="g0", present=True, ecc=0, recovery_error="nvmlDeviceGetFieldValues: NVML error 999")
    state, report = health_rule.step(state, CudaObservation((gpu,), (Xid("g0", 13),)), 1.0)
    assert report.devices[0].state is Health.UNKNOWN and report.devices[0].source == "xid"
    assert report.errors == ("g0: recovery action: nvmlDeviceGetFieldValues: NVML error 999",)
    _, report = health_rule.step(state, CudaObservation((gpu,), (Xid("g0", 79),)), 2.0)
    assert report.devices[0].state is Health.UNHEALTHY, "XID 79 is fatal by the list"
