"""Neuron telemetry from the driver's sysfs counters: memory used per device
(summed over its cores) and health from the uncorrected ECC counters."""

from __future__ import annotations

from pathlib import Path

from ray_accel.core.devices import Device
from ray_accel.core.samples import DeviceSample
from ray_accel.plugins.interface import Telemetry
from ray_accel_neuron import sysfs


class NeuronTelemetry(Telemetry):
    def __init__(self, root: Path, devices: tuple[Device, ...], source: str | None) -> None:
        self.root = root
        self.devices = devices
        self.source = source

    def device_samples(self) -> list[DeviceSample]:
        out = []
        for d in self.devices:
            used: int | None = None
            ecc: dict[str, int] = {}
            if self.source == "sysfs":
                per_core = [
                    sysfs.core_memory_used(self.root, d.index, c) for c in range(int(d.attributes["physical_cores"]))
                ]
                known = [v for v in per_core if v is not None]
                used = sum(known) if known else None
                ecc = {k: v for k, v in sysfs.ecc_uncorrected(self.root, d.index).items() if v > 0}
            gone = self.source == "sysfs" and not (self.root / f"neuron{d.index}").is_dir()
            if gone:
                continue
            reason = ", ".join(f"{k}={v}" for k, v in ecc.items()) or None
            out.append(
                DeviceSample(
                    device_id=d.id,
                    utilization=None,  # the sysfs tree has no utilisation counter
                    memory_used_bytes=used,
                    memory_total_bytes=d.memory_bytes,
                    healthy=reason is None,
                    health_reason=reason,
                )
            )
        return out
