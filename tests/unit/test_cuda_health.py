"""The CUDA health rule, through its monitor on the fake NVML (poll by poll,
counted, never timed), and its ignored-XID list parser."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ray_accel_cuda import CudaPlugin, health_rule
from ray_accel_cuda.health import (
    RECOVERY_FIELD,
    PollErrors,
    RecoveryUnreadable,
    XidMonitor,
    XidPoll,
    action_names,
    recovery_action,
)
from ray_accel_cuda.health_rule import (
    DEFAULT_IGNORED_XIDS,
    IGNORED_XIDS_ENV,
    CudaObservation,
    CudaSettings,
    GpuReading,
    Xid,
    parse_ignored_xids,
)
from ray_accel_cuda.nvml import Nvml

from ray_accel.core.errors import InputError
from ray_accel.core.health import Health
from ray_accel.core.health_track import RECOVERY_POLLS_ENV
from ray_accel.plugins.discovery import discover_plugins
from tests.badinput import badinput
from tests.cuda_monitors import monitor, states
from tests.fakes import fake_nvml
from tests.fakes.fake_nvml import GPU_IS_LOST, UNKNOWN, FakeGpu, FakeHandle, FakeNvml, RecoveryNvml


def test_every_gpu_is_listed_in_index_order_and_healthy_when_all_reads() -> None:
    nv = fake_nvml.a100x8_nvlink()
    plugin, mon = monitor(nv)
    report = mon.poll()
    assert [d.device_id for d in report.devices] == [d.id for d in plugin.list_devices()]
    assert states(report) == [Health.HEALTHY] * 8 and report.events == () and report.errors == ()
    assert plugin.health is mon, "one monitor per plugin: it keeps the rule's state"


def test_an_ignored_xid_only_counts_a_fatal_one_is_fatal_and_sticky() -> None:
    nv = fake_nvml.a100x8_nvlink()
    _, mon = monitor(nv)
    mon.poll()
    fake_nvml.application_fault(nv, 0)
    nv.events.append((1, 79))
    report = mon.poll()
    by_code = {e.code: e for e in report.events}
    assert (
        by_code["13"].fatal is False
        and by_code["13"].reason == "XID 13 (Graphics Engine Exception): not fatal, counted"
    )
    assert by_code["79"].fatal is True and by_code["79"].reason == "XID 79 (GPU has fallen off the bus)"
    assert report.devices[0].state is Health.HEALTHY and report.devices[0].last_event == by_code["13"]
    assert report.devices[1].state is Health.UNHEALTHY
    for _ in range(10):
        report = mon.poll()
    assert report.devices[1].state is Health.UNHEALTHY, "no NVML signal says a GPU recovered"
    assert report.devices[1].healthy_again.startswith(f"cleared by hand: ray-accel health clear {nv.gpus[1].uuid}")
    assert report.events == (), "an event is reported once"


def test_clear_drops_a_sticky_xid() -> None:
    nv = fake_nvml.a100x8_nvlink()
    _, mon = monitor(nv)
    nv.events.append((2, 48))
    assert mon.poll().devices[2].state is Health.UNHEALTHY
    mon.clear(nv.gpus[2].uuid)
    assert mon.poll().devices[2].state is Health.HEALTHY


@badinput("unnamed")
def test_clearing_an_unknown_gpu_names_it() -> None:
    _, mon = monitor(fake_nvml.a100x8_nvlink())
    with pytest.raises(InputError, match="no device 'GPU-nope' on this host"):
        mon.clear("GPU-nope")


def test_the_ignored_list_is_the_users_when_set() -> None:
    nv = fake_nvml.a100x8_nvlink()
    _, mon = monitor(nv, {IGNORED_XIDS_ENV: "79"})
    nv.events += [(0, 79), (1, 13)]
    report = mon.poll()
    assert [(e.code, e.fatal) for e in report.events] == [("79", False), ("13", True)]
    assert states(report)[:2] == [Health.HEALTHY, Health.UNHEALTHY]


def test_ecc_first_reading_is_a_baseline_growth_is_fatal() -> None:
    nv = fake_nvml.a100x8_nvlink()
    nv.gpus[3].ecc_uncorrected = 5  # already there when monitoring began
    _, mon = monitor(nv)
    report = mon.poll()
    assert report.devices[3].state is Health.HEALTHY and report.events == ()
    fake_nvml.double_bit_ecc(nv, 3)
    report = mon.poll()
    ecc = [e for e in report.events if e.kind == "ecc"]
    assert [(e.code, e.reason, e.fatal) for e in ecc] == [
        ("volatile_uncorrected", "uncorrected ECC errors grew from 5 to 6 (volatile count)", True)
    ]
    assert report.devices[3].state is Health.UNHEALTHY
    nv.gpus[3].ecc_uncorrected = 0  # the driver reloaded: a new baseline, and still sticky
    assert mon.poll().devices[3].state is Health.UNHEALTHY
    mon.clear(nv.gpus[3].uuid)
    assert mon.poll().devices[3].state is Health.HEALTHY
    nv.gpus[3].ecc_uncorrected = 1
    assert mon.poll().devices[3].state is Health.UNHEALTHY, "growth from the new baseline"


def test_a_lost_gpu_is_fatal_and_healthy_again_after_k_polls_present() -> None:
    nv = fake_nvml.a100x8_nvlink()
    _, mon = monitor(nv, {RECOVERY_POLLS_ENV: "3"})
    mon.poll()
    fake_nvml.fall_off_the_bus(nv, 4)
    report = mon.poll()
    # Handle-by-UUID answers GPU_IS_LOST for every GPU: only GPU 4's own handle
    # says it is the one. Its XID 79 came after it was lost, so no GPU can be
    # told for it: no GPU is vouched for by XIDs in this poll.
    assert states(report) == [Health.UNKNOWN] * 4 + [Health.UNHEALTHY] + [Health.UNKNOWN] * 3
    assert [(e.kind, e.code) for e in report.events] == [("lost", None)]
    assert any(e.startswith("XID 79 event: its GPU's UUID cannot be read") for e in report.errors)
    report = mon.poll()
    assert states(report) == [Health.HEALTHY] * 4 + [Health.UNHEALTHY] + [Health.HEALTHY] * 3
    assert "present for 3 polls in a row (0 so far)" == report.devices[4].healthy_again
    fake_nvml.back_on_the_bus(nv, 4)
    seen = [mon.poll().devices[4].state for _ in range(3)]
    assert seen == [Health.UNHEALTHY, Health.UNHEALTHY, Health.HEALTHY], "healthy on the 3rd poll present"


def test_an_xid_seen_before_the_gpu_is_lost_stays_after_it_returns() -> None:
    nv = fake_nvml.a100x8_nvlink()
    _, mon = monitor(nv, {RECOVERY_POLLS_ENV: "1"})
    nv.events.append((4, 79))
    mon.poll()
    nv.gpus[4].lost_after_discovery = True
    assert mon.poll().devices[4].state is Health.UNHEALTHY
    fake_nvml.back_on_the_bus(nv, 4)
    report = mon.poll()
    assert report.devices[4].state is Health.UNHEALTHY, "present again, but the XID is sticky"
    assert report.devices[4].healthy_again.startswith("cleared by hand")
    mon.clear(nv.gpus[4].uuid)
    assert mon.poll().devices[4].state is Health.HEALTHY


def test_a_removed_gpu_is_lost_by_uuid() -> None:
    nv = fake_nvml.a100x8_nvlink()
    _, mon = monitor(nv)
    mon.poll()
    fake_nvml.removed(nv, 6)
    report = mon.poll()
    assert report.devices[6].state is Health.UNHEALTHY
    assert report.devices[6].last_event is not None
    assert report.devices[6].last_event.reason == "GPU lost (NVML no longer finds it by its UUID)"
    assert states(report).count(Health.HEALTHY) == 7


def test_a_failed_event_wait_makes_healthy_gpus_unknown_and_keeps_unhealthy_ones() -> None:
    nv = fake_nvml.a100x8_nvlink()
    _, mon = monitor(nv)
    nv.events.append((0, 79))
    mon.poll()
    fake_nvml.event_wait_fails(nv, 0)
    report = mon.poll()
    assert states(report) == [Health.UNHEALTHY] + [Health.UNKNOWN] * 7, "NVIDIA's plugin would fault all eight"
    assert any("nvmlEventSetWait" in e for e in report.errors)
    assert states(mon.poll()) == [Health.UNHEALTHY] + [Health.HEALTHY] * 7


def test_a_poll_that_cannot_look_a_gpu_up_counts_toward_nothing() -> None:
    nv = fake_nvml.a100x8_nvlink()
    _, mon = monitor(nv, {RECOVERY_POLLS_ENV: "2"})
    fake_nvml.removed(nv, 0)
    mon.poll()
    fake_nvml.back_on_the_bus(nv, 0)
    report = mon.poll()  # present: 1 clean reading
    assert report.devices[0].state is Health.UNHEALTHY and "(1 so far)" in report.devices[0].healthy_again
    fake_nvml.lookup_fails(nv, 0)  # GPU 0 is looked up first
    report = mon.poll()
    assert report.devices[0].state is Health.UNHEALTHY and "(1 so far)" in report.devices[0].healthy_again
    assert report.errors[0].startswith(f"{nv.gpus[0].uuid}: presence: nvmlDeviceGetHandleByUUID")
    assert mon.poll().devices[0].state is Health.HEALTHY


def test_unsupported_sources_leave_a_gpu_unknown_not_healthy() -> None:
    nv = FakeNvml([FakeGpu(0, unsupported={"nvmlDeviceGetTotalEccErrors"})], missing={"nvmlEventSetCreate"})
    _, mon = monitor(nv)
    report = mon.poll()
    assert states(report) == [Health.UNKNOWN], "presence alone says nothing of health"
    assert report.devices[0].healthy_again == "a poll that reads a health source of it (none can be read)"


def test_a_binding_without_handle_by_uuid_asks_the_gpus_own_handle() -> None:
    nv = FakeNvml([FakeGpu(0), FakeGpu(1)], missing={"nvmlDeviceGetHandleByUUID"})
    _, mon = monitor(nv)
    assert states(mon.poll()) == [Health.HEALTHY] * 2
    nv.gpus[1].lost_after_discovery = True
    assert states(mon.poll()) == [Health.HEALTHY, Health.UNHEALTHY]


def test_the_samples_and_the_monitor_both_see_every_event() -> None:
    nv = fake_nvml.a100x8_nvlink()
    plugin, mon = monitor(nv)
    plugin.telemetry.device_samples()
    mon.poll()
    nv.events.append((5, 79))
    samples = {s.device_id: s for s in plugin.telemetry.device_samples()}
    assert samples[nv.gpus[5].uuid].recent_events == 1
    assert mon.poll().devices[5].state is Health.UNHEALTHY


def test_the_rule_lets_an_event_override_fatal_and_names_strange_gpus() -> None:
    settings_ = CudaSettings()
    state = health_rule.initial(("g0",), settings_, 0.0)
    obs = CudaObservation(
        gpus=(GpuReading(device_id="g0", present=True, ecc=0),),
        xids=(Xid("g0", 79, fatal=False), Xid("g0", 13, fatal=True), Xid("elsewhere", 79)),
    )
    state, report = health_rule.step(state, obs, 1.0)
    assert [(e.code, e.fatal) for e in report.events] == [("79", False), ("13", True)]
    assert report.devices[0].state is Health.UNHEALTHY
    assert report.errors == ("XID 79 names 'elsewhere', not one of this backend's GPUs",)


def test_an_unknown_xid_keeps_working_shown_by_number() -> None:
    assert health_rule.xid_reason(150, True) == "XID 150"


@badinput("unnamed")
def test_a_bad_ignored_list_stops_the_backend_before_hardware_naming_it() -> None:
    with pytest.raises(InputError, match=rf"{IGNORED_XIDS_ENV}='13,,31': '' is not an XID"):
        CudaPlugin(FakeNvml([FakeGpu(0)]), environ={IGNORED_XIDS_ENV: "13,,31"})


@badinput("exit-code")
def test_discovery_turns_a_bad_ignored_list_into_the_users_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(IGNORED_XIDS_ENV, "13;31")
    (status,) = discover_plugins(only="cuda")
    assert isinstance(status.error, InputError) and "'13;31'" in str(status.error)


def test_the_default_ignored_list_is_nvidias() -> None:
    assert DEFAULT_IGNORED_XIDS == {13, 31, 43, 45, 68, 109}
    assert health_rule.ignored_xids({}) == DEFAULT_IGNORED_XIDS
    assert health_rule.ignored_xids({IGNORED_XIDS_ENV: ""}) == frozenset(), "empty: every XID is fatal"


@settings(max_examples=300, deadline=None)
@given(st.frozensets(st.integers(0, health_rule.MAX_XID), max_size=20))
def test_an_ignored_list_survives_formatting(xids: frozenset[int]) -> None:
    assert parse_ignored_xids(",".join(str(x) for x in sorted(xids))) == xids


@badinput("unnamed")
@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("0123456789,; -+x\u0664")), max_size=16))
def test_an_ignored_list_is_read_strictly_or_refused_naming_it(text: str) -> None:
    tokens = text.split(",")
    good = text == "" or (
        all(t.isascii() and t.isdigit() and (t == "0" or not t.startswith("0")) for t in tokens)
        and len(set(map(int, tokens))) == len(tokens)
    )
    if good:
        assert parse_ignored_xids(text) == {int(t) for t in tokens if t}
    else:
        with pytest.raises(InputError) as e:
            parse_ignored_xids(text)
        assert IGNORED_XIDS_ENV in str(e.value) and repr(text) in str(e.value)


@badinput("unnamed")
def test_an_ignored_list_past_nvmls_range_is_refused() -> None:
    with pytest.raises(InputError, match="past the largest XID"):
        parse_ignored_xids(str(1 << 64))


# The monitor's reading of a GPU when one NVML call fails, and what it
# keeps for the next decider (the `RuleMonitor` seam's kept/resume).
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
        return recovery_action(Nvml(nv), nv.nvmlDeviceGetHandleByIndex(0), action_names(nv))

    with pytest.raises(RecoveryUnreadable, match=f"{RECOVERY_FIELD}: NVML error {UNKNOWN}"):
        read(FieldAnswer([FakeGpu(0)], code=UNKNOWN))
    with pytest.raises(RecoveryUnreadable, match=f"{RECOVERY_FIELD}: value type 7, not an unsigned int"):
        read(FieldAnswer([FakeGpu(0)], value_type=7))
    assert read(FieldAnswer([FakeGpu(0)], missing={"nvmlDeviceGetFieldValues"})) is None, "a binding without it"
    assert read(FieldAnswer([FakeGpu(0, recovery_action="DRAIN_AND_RESET")])).name == "DRAIN_AND_RESET"
