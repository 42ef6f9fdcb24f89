"""Backends that exist only in the tests, registered through a real entry point."""

from __future__ import annotations

from ray_accel.core.devices import Device, HostInfo
from ray_accel.plugins.interface import DevicePlugin, visibility_protected

VISIBLE_ENV = "FAKE_TPU_VISIBLE_CHIPS"


class FakeTPU(DevicePlugin):
    name = "faketpu"
    resource_name = "FAKETPU"
    visible_ids_env = VISIBLE_ENV
    family = "faketpu"
    # What a third-party backend declares: its collective, and the variables
    # no hook may set (its mask, Ray's switch for it, its collective's own).
    collectives = ("fakeccl",)
    protected_env = visibility_protected(VISIBLE_ENV) | {"FAKE_TPU_COMM_ID"}

    def probe(self) -> str | None:
        return None

    def list_devices(self) -> tuple[Device, ...]:
        return tuple(
            Device(id=f"chip{i}", family=self.family, index=i, model="FakeTPU v1", memory_bytes=16 << 30, core_ids=(i,))
            for i in range(4)
        )

    def host_info(self) -> HostInfo:
        return HostInfo(
            plugin=self.name,
            family=self.family,
            accelerator_type="FakeTPU-v1",
            resource_name=self.resource_name,
            visible_ids_env=self.visible_ids_env,
            device_count=4,
            core_count=4,
        )


class Exploding(FakeTPU):
    name = "exploding"

    def probe(self) -> str | None:
        raise RuntimeError("driver went away")


class Absent(FakeTPU):
    name = "absent"

    def probe(self) -> str | None:
        return "no /dev/fake found"
