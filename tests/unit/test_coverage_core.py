"""Core values refused or worded where the other tests do not reach: a bad
inventory, a link or an odd error where a file should be, a mask that cannot
be published, a device's verdict with a bad source, a device in doubt."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest

from ray_accel.core import masks
from ray_accel.core.devices import Device, DeviceError, validate_inventory
from ray_accel.core.files import UnreadableFile, describe, read_bytes
from ray_accel.core.health import DeviceHealth, Health
from ray_accel.core.health_track import Tracked, healthy_again
from ray_accel.core.reader import ReadError


def dev(
    index: int, cores: tuple[int, ...] | None = None, peers: tuple[str, ...] = (), id: str = "", memory_bytes: int = 0
) -> Device:
    core_ids = (index,) if cores is None else cores
    return Device(
        id=id or f"d:{index}",
        family="f",
        index=index,
        model="m",
        memory_bytes=memory_bytes,
        core_ids=core_ids,
        peers=peers,
    )


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        ([dev(0), dev(1, id="d:0")], "duplicate device id 'd:0'"),
        ([dev(0), dev(0, id="d:9", cores=(9,))], "duplicate device index 0 (device 'd:9')"),
        ([dev(0, cores=())], "device 'd:0' has no cores"),
        ([dev(0, memory_bytes=-1)], "device 'd:0' has negative memory -1"),
        ([dev(0, cores=(-2,))], "device 'd:0' has negative core id -2"),
        ([dev(0, cores=(0, 1)), dev(1)], "core 1 belongs to both 'd:0' and 'd:1'"),
        ([dev(0, peers=("d:0",))], "device 'd:0' lists itself as a peer"),
        ([dev(0, peers=("d:7",))], "device 'd:0' names unknown peer 'd:7'"),
        ([dev(0, peers=("d:1",)), dev(1)], "link 'd:0' -> 'd:1' is one-sided: 'd:1' does not list 'd:0'"),
    ],
)
def test_an_inventory_that_cannot_be_true_is_refused_naming_the_device(devices: list[Device], message: str) -> None:
    with pytest.raises(DeviceError, match=f"^{re.escape(message)}$"):
        validate_inventory(devices)


def test_linked_devices_in_any_order_are_the_inventory_by_index() -> None:
    got = validate_inventory([dev(1, peers=("d:0",)), dev(0, peers=("d:1",))])
    assert [d.id for d in got] == ["d:0", "d:1"]


def test_a_link_is_refused_without_following_and_odd_errors_are_described(tmp_path: Path) -> None:
    target = tmp_path / "host.json"
    target.write_text("{}")
    (tmp_path / "link.json").symlink_to(target)
    assert read_bytes(tmp_path / "link.json") == b"{}"
    with pytest.raises(UnreadableFile, match="link.json is a symbolic link; refusing to follow it"):
        read_bytes(tmp_path / "link.json", follow=False)
    assert describe(OSError(errno.EIO, "Input/output error")) == "Input/output error"
    assert describe(OSError(errno.EPERM, "x")) == "permission denied"
    assert describe(OSError()) == "OSError"


def test_a_mask_that_cannot_be_published_never_breaks_the_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv(masks.MASK_DIR_ENV, str(blocker / "masks"))
    masks.publish("0-3")  # no exception
    assert blocker.read_text() == ""
    monkeypatch.setenv(masks.MASK_DIR_ENV, str(tmp_path / "masks"))
    masks.publish("0-3")
    assert masks.read_records(str(tmp_path / "masks"))[os.getpid()][0] == "0-3"


def test_a_verdicts_source_must_be_a_lower_case_word() -> None:
    assert DeviceHealth("d:0", Health.HEALTHY, 1.0, None, "", source="recovery-action").source == "recovery-action"
    with pytest.raises(ReadError, match="is not a source"):
        DeviceHealth("d:0", Health.HEALTHY, 1.0, None, "", source="Recovery Action")


def test_a_device_in_doubt_is_healthy_again_only_when_cleared_by_hand() -> None:
    t = Tracked(device_id="d:0", state=Health.UNKNOWN, since=1.0, doubt="its kept health could not be read")
    assert healthy_again(t, 3) == "cleared by hand: ray-accel health clear d:0 (its kept health could not be read)"
