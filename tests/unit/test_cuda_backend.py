"""CUDA backend driven by the fake NVML scenario catalogue."""

from __future__ import annotations

import logging

import pynvml
import pytest
from ray_accel_cuda import NA, CudaPlugin, Nvml
from ray_accel_cuda.enumeration import accelerator_type
from ray_accel_cuda.health import XID_WINDOW_S

from ray_accel.core.visibility import VisibilityError
from tests.fakes import fake_nvml
from tests.fakes.fake_nvml import FakeGpu, FakeNvml


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def active(nv: FakeNvml, clock: Clock | None = None) -> CudaPlugin:
    plugin = CudaPlugin(nv, clock=clock or Clock())
    assert plugin.probe() is None
    nv.discovered = True
    return plugin


def test_a100x8_nvlink() -> None:
    plugin = active(fake_nvml.a100x8_nvlink())
    devices = plugin.list_devices()
    assert len(devices) == 8
    assert all(d.id.startswith("GPU-") for d in devices)
    assert [d.core_ids for d in devices] == [(i,) for i in range(8)]
    assert all(len(d.peers) == 7 for d in devices)
    assert [d.numa_node for d in devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert devices[2].pci_bus_id == "00000000:12:00.0"
    info = plugin.host_info()
    assert (info.accelerator_type, info.driver_version, info.runtime_version) == ("A100", "550.90.07", "12.4")
    samples = plugin.telemetry.device_samples()
    assert samples[0].utilization == 0.5 and samples[0].power_watts == 250.0 and samples[0].recent_events == 0


def test_nvlink_queries_are_cached() -> None:
    nv = fake_nvml.a100x8_nvlink()
    plugin = active(nv)
    before = nv.calls["nvmlDeviceGetP2PStatus"]
    assert before == 2 * 28  # each pair once, two handle checks per call
    plugin.list_devices()
    plugin.telemetry.device_samples()
    assert nv.calls["nvmlDeviceGetP2PStatus"] == before


def test_lost_gpu_is_skipped_and_reported() -> None:
    plugin = active(fake_nvml.lost_gpu())
    assert [d.index for d in plugin.list_devices()] == [0, 1, 2, 4, 5, 6, 7]
    assert plugin.host_info().attributes["lost_gpus"] == "3"


def test_gpu_lost_after_discovery_reads_nothing_and_others_still_report() -> None:
    nv = fake_nvml.a100x8_nvlink()
    plugin = active(nv)
    nv.gpus[5].lost_after_discovery = True
    samples = {s.device_id: s for s in plugin.telemetry.device_samples()}
    lost = samples[nv.gpus[5].uuid]
    assert lost.utilization is None and lost.recent_events is None
    assert sum(s.recent_events == 0 for s in samples.values()) == 7


def test_not_supported_fields_become_none() -> None:
    plugin = active(fake_nvml.not_supported_fields())
    s = plugin.telemetry.device_samples()[0]
    assert s.power_watts is None and s.temperature_c is None
    assert s.utilization == 0.5
    assert plugin.list_devices()[0].numa_node == -1  # NVML unsupported, no sysfs entry


def test_mig_gpu_is_one_opaque_device() -> None:
    plugin = active(fake_nvml.mig_enabled())
    d0, d1 = plugin.list_devices()
    assert d0.attributes["mig"] == "enabled" and "opaque" in d0.attributes["mig_note"]
    assert d1.attributes["mig"] == "disabled"
    assert d0.core_ids == (0,)


def test_function_not_found_is_na_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        plugin = active(fake_nvml.function_not_found())
        plugin.telemetry.device_samples()
        plugin.telemetry.device_samples()
    warnings = [r for r in caplog.records if "binding is newer than the driver" in r.getMessage()]
    assert len(warnings) == 1
    assert plugin.list_devices()[0].numa_node == -1
    assert all(s.recent_events == 0 for s in plugin.telemetry.device_samples())


@pytest.mark.parametrize(("scenario", "reason"), [("library_missing", "NVML library"), ("no_gpu", "no NVIDIA GPU")])
def test_inactive_without_library_or_gpu(scenario: str, reason: str) -> None:
    plugin = CudaPlugin(fake_nvml.SCENARIOS[scenario]())
    got = plugin.probe()
    assert got is not None and reason in got


def test_real_nvml_on_this_machine_is_inactive_not_crashing() -> None:
    reason = CudaPlugin().probe()
    # CI machines have no NVIDIA driver; a GPU machine must find its GPUs.
    assert reason is None or "NVML" in reason or "nvidia-ml-py" in reason


def test_fake_handles_behave_as_nvidia_ml_py_handles() -> None:
    """The constraint the XID path must live with (see fake_nvml's docstring):
    a new handle per call, identity equality, unhashable; an event's handle is
    never one the caller holds."""
    nv = fake_nvml.a100x8_nvlink()
    a, b = nv.nvmlDeviceGetHandleByIndex(0), nv.nvmlDeviceGetHandleByIndex(0)
    assert a is not b and a != b
    with pytest.raises(TypeError):
        hash(a)
    event_set = nv.nvmlEventSetCreate()
    nv.nvmlDeviceRegisterEvents(a, pynvml.nvmlEventTypeXidCriticalError, event_set)
    nv.events.append((0, 79))
    event = nv.nvmlEventSetWait(event_set, 0)
    assert event.device is not a and event.device != a
    assert nv.nvmlDeviceGetUUID(event.device) == nv.nvmlDeviceGetUUID(a), "only a call on it says which GPU"
    with pytest.raises(pynvml.NVMLError) as e:
        nv.nvmlEventSetWait(event_set, 0)
    assert e.value.value == fake_nvml.TIMEOUT


def test_xid_health_ignores_application_xids_and_heals() -> None:
    clock = Clock()
    nv = fake_nvml.a100x8_nvlink()
    plugin = active(nv, clock)
    nv.events += [(0, 13), (0, 43), (1, 79)]  # 13/43: application faults; 79: fell off the bus
    samples = {s.device_id: s for s in plugin.telemetry.device_samples()}
    assert samples[nv.gpus[0].uuid].recent_events == 0
    assert samples[nv.gpus[1].uuid].recent_events == 1, "a critical XID counts"
    assert sum(s.recent_events == 0 for s in samples.values()) == 7
    assert plugin.host_info().attributes["nvml_poll_errors"] == "0"
    clock.now += XID_WINDOW_S + 1
    assert all(s.recent_events == 0 for s in plugin.telemetry.device_samples()), "counted in the window only"


def test_xid_events_arriving_later_are_matched_by_uuid() -> None:
    nv = fake_nvml.a100x8_nvlink()
    plugin = active(nv)
    assert all(s.recent_events == 0 for s in plugin.telemetry.device_samples())  # registers the event set
    nv.events += [(6, 48), (6, 79), (2, 109)]  # 48: double-bit ECC; 109: application context switch timeout
    samples = {s.device_id: s for s in plugin.telemetry.device_samples()}
    assert samples[nv.gpus[6].uuid].recent_events == 2
    assert [d for d, s in samples.items() if s.recent_events] == [nv.gpus[6].uuid]


def test_nvml_errors_in_the_poll_are_logged_once_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    nv = fake_nvml.a100x8_nvlink()
    plugin = active(nv)
    nv.wait_errors += [fake_nvml.UNKNOWN]
    with caplog.at_level(logging.WARNING, logger="ray_accel_cuda.health"):
        samples = plugin.telemetry.device_samples()
        assert len(samples) == 8, "a failed poll does not cost the samples"
        nv.wait_errors += [fake_nvml.UNKNOWN]
        plugin.telemetry.device_samples()
    attrs = plugin.host_info().attributes
    assert attrs["nvml_poll_errors"] == "2"
    assert "nvmlEventSetWait" in attrs["nvml_poll_last_error"] and "Unknown" in attrs["nvml_poll_last_error"]
    logged = [r for r in caplog.records if "NVML health poll error" in r.getMessage()]
    assert len(logged) == 1 and "nvmlEventSetWait" in logged[0].getMessage()
    nv.events.append((3, 79))
    samples = {s.device_id: s for s in plugin.telemetry.device_samples()}
    assert samples[nv.gpus[3].uuid].recent_events == 1, "polling goes on after an error"


def test_event_from_a_gpu_lost_since_is_counted_not_dropped() -> None:
    nv = fake_nvml.a100x8_nvlink()
    plugin = active(nv)
    plugin.telemetry.device_samples()
    nv.events.append((5, 79))
    nv.gpus[5].lost_after_discovery = True
    samples = {s.device_id: s for s in plugin.telemetry.device_samples()}
    assert samples[nv.gpus[5].uuid].recent_events is None
    attrs = plugin.host_info().attributes
    assert attrs["nvml_poll_errors"] == "1" and "UUID" in attrs["nvml_poll_last_error"]


def test_registration_failure_is_counted_and_other_gpus_still_report_xids() -> None:
    nv = fake_nvml.a100x8_nvlink()
    plugin = active(nv)
    nv.gpus[0].lost_after_discovery = True
    nv.events.append((1, 79))
    samples = {s.device_id: s for s in plugin.telemetry.device_samples()}
    assert samples[nv.gpus[1].uuid].recent_events == 1
    assert plugin.host_info().attributes["nvml_poll_errors"] == "1"


def test_xid_events_unsupported_is_said() -> None:
    nv = fake_nvml.FakeNvml([FakeGpu(0)], missing={"nvmlEventSetCreate"})
    plugin = active(nv)
    assert plugin.telemetry.device_samples()[0].recent_events == 0
    assert plugin.host_info().attributes["xid_events"] == "unsupported"


def test_power_and_temperature_reach_the_sample() -> None:
    nv = FakeNvml([FakeGpu(0, power_mw=312_500, temp=61)])
    s = active(nv).telemetry.device_samples()[0]
    assert (s.power_watts, s.temperature_c) == (312.5, 61.0)


def test_device_holders() -> None:
    nv = FakeNvml([FakeGpu(0, processes=[(77, 500), (88, None), (77, 1)]), FakeGpu(1), FakeGpu(2, processes=[(99, 5)])])
    plugin = active(nv)
    nv.gpus[2].lost_after_discovery = True
    holders = plugin.telemetry.device_holders()
    assert holders == {nv.gpus[0].uuid: (77, 88), nv.gpus[1].uuid: ()}, "each PID once; a lost GPU is absent"


def test_ray_duplicate_uuid_data_makes_cuda_inactive_naming_the_uuid() -> None:
    reason = CudaPlugin(fake_nvml.ray_duplicate_uuid()).probe()
    assert reason is not None
    assert repr(fake_nvml.RAY_MOCK_UUID) in reason and "GPUs 0, 1, 2" in reason


def test_mixed_models_are_typed_per_device_not_by_gpu_0() -> None:
    plugin = active(fake_nvml.mixed_v100_a100())
    assert [d.accelerator_type for d in plugin.list_devices()] == ["V100", "A100", "A100"]
    info = plugin.host_info()
    # Ray 2.60 types this host V100 (GPU 0); we say it has no one type.
    assert info.accelerator_type is None and info.attributes["accelerator_types"] == "A100,V100"


def test_process_memory() -> None:
    nv = FakeNvml([FakeGpu(0, processes=[(77, 500), (88, 1), (66, None)]), FakeGpu(1, processes=[(77, 20)])])
    plugin = active(nv)
    held = plugin.telemetry.process_device_memory([77, 99, 66])
    assert held == {77: {nv.gpus[0].uuid: 500, nv.gpus[1].uuid: 20}}, "only asked PIDs, only held devices"


def test_cuda_visible_devices_forms() -> None:
    nv = fake_nvml.a100x8_nvlink()
    plugin = active(nv)
    assert plugin.parse_visible("2,0-1") == [2, 0, 1]
    assert plugin.parse_visible(f"{nv.gpus[4].uuid},1") == [4, 1]
    assert plugin.parse_visible("NoDevFiles") == []
    assert plugin.parse_visible(None) is None
    with pytest.raises(VisibilityError, match="out of range"):
        plugin.parse_visible("9")
    with pytest.raises(VisibilityError, match="matches 0 GPUs"):
        plugin.parse_visible("GPU-nope")
    with pytest.raises(VisibilityError, match="empty entry"):
        plugin.parse_visible("1,,2")


def test_cuda_visible_devices_with_a_lost_gpu_uses_nvml_indexes() -> None:
    plugin = active(fake_nvml.lost_gpu())
    assert plugin.parse_visible("7,4") == [7, 4]
    with pytest.raises(VisibilityError, match="GPU 3 .* out of range"):
        plugin.parse_visible("3")


def test_nvml_wrapper_query_sentinel_and_single_init() -> None:
    nv = fake_nvml.not_supported_fields()
    calls = {"n": 0}
    original = nv.nvmlInit

    def counting_init() -> None:
        calls["n"] += 1
        original()

    nv.nvmlInit = counting_init  # type: ignore[method-assign]
    w = Nvml(nv)
    h = w.query("nvmlDeviceGetHandleByIndex", 0)
    assert w.query("nvmlDeviceGetPowerUsage", h) is NA
    assert w.query("nvmlDeviceGetPowerUsage", h, default=None) is None
    assert w.query("nvmlNoSuchFunction") is NA
    assert calls["n"] == 1
    assert not NA


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA RTX PRO 6000 Blackwell", "RTX-PRO-6000"),
        ("Tesla V100-SXM2-16GB", "V100"),
    ],
)
def test_accelerator_type(name: str, expected: str) -> None:
    assert accelerator_type(name) == expected
