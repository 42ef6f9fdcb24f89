"""The CUDA monitor's reading of a GPU when one NVML call fails, and what it
keeps for the next decider (the `RuleMonitor` seam's kept/resume)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
from ray_accel_cuda.health import RECOVERY_FIELD, PollErrors, RecoveryUnreadable, XidMonitor, XidPoll, recovery_action
from ray_accel_cuda.health_rule import GpuReading
from ray_accel_cuda.nvml import Nvml

from ray_accel.core.health import Health
from tests.fakes import fake_nvml
from tests.fakes.fake_nvml import GPU_IS_LOST, UNKNOWN, FakeGpu, FakeHandle, FakeNvml, RecoveryNvml
from tests.unit.test_cuda_health import monitor


class Failing:
    """A fake driver's mixin: the named call on GPU `index` answers `code`."""

    failing: dict[tuple[str, int], int]

    def _gpu(self, h: FakeHandle, field_name: str) -> FakeGpu:
        g: FakeGpu = super()._gpu(h, field_name)  # type: ignore[misc]
        code = self.failing.get((field_name, g.index))
        if code is not None:
            raise pynvml.NVMLError(code)
        return g


class FailingNvml(Failing, FakeNvml):
    failing: dict[tuple[str, int], int] = {}


class FailingRecoveryNvml(Failing, RecoveryNvml):
    failing: dict[tuple[str, int], int] = {}


def reading(nv: Any, index: int, call: str, code: int) -> GpuReading:
    """GPU `index`'s reading in a poll where `call` on it answers `code`."""
    _, mon = monitor(nv)
    nv.failing = {(call, index): code}
    return mon.observe().gpus[index]


def test_a_gpus_own_handle_that_fails_or_answers_as_another_leaves_it_unknown() -> None:
    nv = FailingNvml([FakeGpu(0), FakeGpu(1)], missing={"nvmlDeviceGetHandleByUUID"})
    got = reading(nv, 1, "nvmlDeviceGetUUID", UNKNOWN)
    assert got.present is None and got.presence_error is not None
    assert got.presence_error.startswith("nvmlDeviceGetUUID: NVMLError")
    nv = FailingNvml([FakeGpu(0), FakeGpu(1)], missing={"nvmlDeviceGetHandleByUUID"})
    _, mon = monitor(nv)
    nv.gpus[1].uuid_override = "GPU-someone-else"
    got = mon.observe().gpus[1]
    assert got.present is None and got.presence_error == (
        "nvmlDeviceGetUUID: its handle now answers as 'GPU-someone-else'"
    )


@pytest.mark.parametrize("call", ["nvmlDeviceGetFieldValues", "nvmlDeviceGetTotalEccErrors"])
def test_a_gpu_lost_while_its_health_is_read_is_absent(call: str) -> None:
    got = reading(FailingRecoveryNvml([FakeGpu(0), FakeGpu(1)]), 0, call, GPU_IS_LOST)
    assert (got.present, got.absent_why) == (False, "NVML: GPU is lost")


def test_a_failed_recovery_read_is_an_error_and_the_ecc_count_is_still_read() -> None:
    got = reading(FailingRecoveryNvml([FakeGpu(0, ecc_uncorrected=3)]), 0, "nvmlDeviceGetFieldValues", UNKNOWN)
    assert got.present is True and got.ecc == 3 and got.recovery is None
    assert got.recovery_error is not None and got.recovery_error.startswith("nvmlDeviceGetFieldValues: NVMLError")


def test_a_failed_ecc_read_is_an_error_and_the_recovery_action_is_kept() -> None:
    nv = FailingRecoveryNvml([FakeGpu(0, recovery_action="DRAIN_AND_RESET")])
    got = reading(nv, 0, "nvmlDeviceGetTotalEccErrors", UNKNOWN)
    assert got.present is True and got.ecc is None and got.recovery is not None
    assert got.recovery.name == "DRAIN_AND_RESET"
    assert got.ecc_error is not None and got.ecc_error.startswith("nvmlDeviceGetTotalEccErrors: NVMLError")


def test_a_resumed_monitor_keeps_a_sticky_fault_and_the_ecc_baseline() -> None:
    nv = fake_nvml.a100x8_nvlink()
    _, first = monitor(nv)
    fake_nvml.fall_off_the_bus(nv, 3)
    assert first.poll().devices[3].state is Health.UNHEALTHY
    fake_nvml.back_on_the_bus(nv, 3)
    nv.gpus[5].ecc_uncorrected += 1  # grew while no monitor ran
    kept = first.kept()
    assert [k.device_id for k in kept if k.faults] == [nv.gpus[3].uuid]
    # A new decider: the same GPUs, no event left over from the old one's event sets.
    fresh, resumed = monitor(FakeNvml(nv.gpus))[1], monitor(FakeNvml(nv.gpus))[1]
    resumed.resume(kept)
    report = resumed.poll()
    assert report.devices[3].state is Health.UNHEALTHY, "the XID 79 is sticky across deciders"
    assert report.devices[5].state is Health.UNHEALTHY, "growth since the kept baseline is fatal"
    after = fresh.poll()
    assert after.devices[3].state is Health.HEALTHY and after.devices[5].state is Health.HEALTHY


# ---------------------------------------------------------------- XID events and the recovery field, one call at a time


def xids(nv: FakeNvml) -> XidMonitor:
    handles = {g.uuid: nv.nvmlDeviceGetHandleByIndex(g.index) for g in nv.gpus}
    return XidMonitor(Nvml(nv), handles, lambda: 0.0, PollErrors())


class OddEvents(FakeNvml):
    """A driver that first answers with an event set it cannot make, then
    delivers an event of another type ahead of the XIDs."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        super().__init__(gpus)
        self.create_errors = [UNKNOWN]
        self.other_first = True

    def nvmlEventSetCreate(self) -> int:
        if self.create_errors:
            raise pynvml.NVMLError(self.create_errors.pop(0))
        return super().nvmlEventSetCreate()

    def nvmlEventSetWait(self, event_set: int, timeout_ms: int) -> SimpleNamespace:
        if self.other_first:
            self.other_first = False
            return SimpleNamespace(device=None, eventType=pynvml.nvmlEventTypeXidCriticalError << 1, eventData=0)
        return super().nvmlEventSetWait(event_set, timeout_ms)


def test_an_event_set_not_made_is_an_error_and_tried_again_at_the_next_poll() -> None:
    nv = OddEvents([FakeGpu(0)])
    mon = xids(nv)
    first = mon.poll()
    assert first.error is not None and first.error.startswith("creating the XID event set: NVMLError")
    assert mon.errors.count == 1
    nv.events.append((0, 79))
    assert mon.poll() == XidPoll(((nv.gpus[0].uuid, 79),)), "the other event type is passed over"


def test_an_xid_whose_gpu_cannot_be_told_is_unattributed() -> None:
    nv = FakeNvml([FakeGpu(0), FakeGpu(1)])
    mon = xids(nv)
    mon.poll()
    fake_nvml.fall_off_the_bus(nv, 1)
    nv.discovered = True  # the GPU answers GPU_IS_LOST from now on, its event's handle too
    got = mon.poll()
    assert got.events == () and got.error is None
    assert got.unattributed == (
        "XID 79 event: its GPU's UUID cannot be read (GpuLost: nvmlDeviceGetUUID: GPU is lost)",
    )


def test_a_binding_that_cannot_wait_for_events_makes_xids_unsupported() -> None:
    mon = xids(FakeNvml([FakeGpu(0)], missing={"nvmlEventSetWait"}))
    assert mon.poll() == XidPoll(supported=False) and mon.supported is False


class FieldAnswer(RecoveryNvml):
    """The recovery field answered with `code` and `value_type`."""

    def __init__(self, gpus: list[FakeGpu], code: int = 0, value_type: int | None = None, **kw: Any) -> None:
        super().__init__(gpus, **kw)
        self.code, self.value_type = code, value_type

    def nvmlDeviceGetFieldValues(self, h: FakeHandle, field_ids: list[int]) -> list[SimpleNamespace]:
        out = super().nvmlDeviceGetFieldValues(h, field_ids)
        out[0].nvmlReturn = self.code or out[0].nvmlReturn
        out[0].valueType = out[0].valueType if self.value_type is None else self.value_type
        return out


def test_a_recovery_field_read_that_fails_or_is_not_an_unsigned_int_is_unreadable() -> None:
    def read(nv: FakeNvml) -> Any:
        return recovery_action(Nvml(nv), nv.nvmlDeviceGetHandleByIndex(0))

    with pytest.raises(RecoveryUnreadable, match=f"{RECOVERY_FIELD}: NVML error {UNKNOWN}"):
        read(FieldAnswer([FakeGpu(0)], code=UNKNOWN))
    with pytest.raises(RecoveryUnreadable, match=f"{RECOVERY_FIELD}: value type 7, not an unsigned int"):
        read(FieldAnswer([FakeGpu(0)], value_type=7))
    assert read(FieldAnswer([FakeGpu(0)], missing={"nvmlDeviceGetFieldValues"})) is None, "a binding without it"
    assert read(FieldAnswer([FakeGpu(0, recovery_action="DRAIN_AND_RESET")])).name == "DRAIN_AND_RESET"
