"""The CUDA health monitor: reads NVML's health sources each poll and
applies the CUDA rule (`health_rule`, where what is fatal and what makes a
GPU healthy again is written down).

A GPU is found again by its UUID each poll (`nvmlDeviceGetHandleByUUID`),
not by the handle discovery took: NVML_ERROR_NOT_FOUND there means it is no
longer on the system. That call answers NVML_ERROR_GPU_IS_LOST when ANY GPU
fell off the bus (nvml.h), so then, and with a binding that lacks the call,
the GPU's own discovery handle is asked (nvmlDeviceGetUUID answers
GPU_IS_LOST for "the target GPU" only). XID events come through their own event set (NVML delivers
every event to each set registered for the GPU), so the samples' set and
this one do not take each other's events.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import Any

from ray_accel.core.devices import Device
from ray_accel.plugins.rule_monitor import RuleMonitor
from ray_accel_cuda import health_rule
from ray_accel_cuda.health import PollErrors, XidMonitor, action_names, ecc_uncorrected, recovery_action
from ray_accel_cuda.health_rule import CudaObservation, CudaSettings, GpuReading, Xid
from ray_accel_cuda.nvml import NA, NOT_FOUND, GpuLost, Nvml, error_code, text

log = logging.getLogger(__name__)


def _why(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


class CudaHealthMonitor(RuleMonitor[health_rule.CudaState, CudaObservation]):
    def __init__(
        self,
        nvml: Nvml,
        devices: Sequence[Device],
        handles: Mapping[str, Any],
        settings: CudaSettings,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.nvml = nvml
        self.devices = tuple(sorted(devices, key=lambda d: d.index))
        self.handles = dict(handles)
        self.errors = PollErrors()
        self._warned: set[int] = set()  # recovery action values the binding does not name, warned of once
        self.xids = XidMonitor(nvml, self.handles, time.monotonic, self.errors, ignored=settings.ignored_xids)
        super().__init__(
            health_rule.RULE, health_rule.initial(tuple(d.id for d in self.devices), settings, clock()), clock
        )

    @cached_property
    def _actions(self) -> dict[int, str]:
        # The binding's names do not change while it is loaded: read once, not per GPU per poll.
        return action_names(self.nvml.module)

    def _handle(self, device_id: str) -> tuple[Any, GpuReading | None]:
        """(a handle for the GPU, None) or (None, its reading: absent or unknown)."""
        try:
            h = self.nvml.query("nvmlDeviceGetHandleByUUID", device_id)
        except GpuLost:
            # nvml.h: this call answers NVML_ERROR_GPU_IS_LOST "if ANY GPU has
            # fallen off the bus", so only the GPU's own handle can say whether it is this one.
            h = NA
        except Exception as e:
            if error_code(e) == NOT_FOUND:
                return None, GpuReading(
                    device_id=device_id, present=False, absent_why="NVML no longer finds it by its UUID"
                )
            return None, GpuReading(
                device_id=device_id, present=None, presence_error=f"nvmlDeviceGetHandleByUUID: {_why(e)}"
            )
        if h is not NA:
            return h, None
        h = self.handles[device_id]
        try:
            uuid = text(self.nvml.query("nvmlDeviceGetUUID", h))
        except GpuLost:
            return None, GpuReading(device_id=device_id, present=False, absent_why="NVML: GPU is lost")
        except Exception as e:
            return None, GpuReading(device_id=device_id, present=None, presence_error=f"nvmlDeviceGetUUID: {_why(e)}")
        if uuid != device_id:
            why = f"nvmlDeviceGetUUID: its handle now answers as {uuid!r}"
            return None, GpuReading(device_id=device_id, present=None, presence_error=why)
        return h, None

    def _reading(self, device_id: str) -> GpuReading:
        h, reading = self._handle(device_id)
        if reading is not None:
            return reading
        try:
            recovery, recovery_error = recovery_action(self.nvml, h, self._actions), None
        except GpuLost:
            return GpuReading(device_id=device_id, present=False, absent_why="NVML: GPU is lost")
        except Exception as e:
            recovery, recovery_error = None, f"nvmlDeviceGetFieldValues: {_why(e)}"
        if recovery is not None and recovery.name is None and recovery.value not in self._warned:
            self._warned.add(recovery.value)
            log.warning("GPU %s: %s", device_id, recovery.reason())
        try:
            return GpuReading(
                device_id=device_id,
                present=True,
                ecc=ecc_uncorrected(self.nvml, h),
                recovery=recovery,
                recovery_error=recovery_error,
            )
        except GpuLost:
            return GpuReading(device_id=device_id, present=False, absent_why="NVML: GPU is lost")
        except Exception as e:
            why = f"nvmlDeviceGetTotalEccErrors: {_why(e)}"
            return GpuReading(
                device_id=device_id, present=True, ecc_error=why, recovery=recovery, recovery_error=recovery_error
            )

    def observe(self) -> CudaObservation:
        """What NVML says now (I/O only; the rule decides)."""
        polled = self.xids.poll()
        source: health_rule.XidSource = "read"
        error = polled.error
        if error is None and polled.unattributed:
            # An XID came for a GPU that could not be told: any of them may
            # have had it, so none can be vouched for by XIDs in this poll
            # (NVIDIA's device plugin marks every GPU unhealthy then; unknown
            # is no reason to drain one).
            error = "; ".join(polled.unattributed)
        if error is not None:
            source = "failed"
        elif not polled.supported:
            source = "unsupported"
        return CudaObservation(
            gpus=tuple(self._reading(d.id) for d in self.devices),
            xids=tuple(Xid(uuid, xid) for uuid, xid in polled.events),
            xid_source=source,
            xid_error=error,
            errors=polled.unattributed,
        )
