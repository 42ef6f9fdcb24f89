"""The core device model's additions: external peers and host warnings."""

from __future__ import annotations

import re

import pytest

from ray_accel.core.devices import Device, DeviceError, HostInfo, validate_inventory
from ray_accel.core.reader import dump_fields

FAMILY_NEURON = "neuron"  # any family name: the core knows none


def dev(index: int, peers: tuple[str, ...] = (), external: tuple[str, ...] = ()) -> Device:
    return Device(
        id=f"neuron:{index}",
        family=FAMILY_NEURON,
        index=index,
        model="Trainium2",
        memory_bytes=0,
        core_ids=(index,),
        peers=peers,
        external_peers=external,
    )


def test_external_peers_are_kept_shown_and_not_checked_for_symmetry() -> None:
    # A container given device 5 of a trn2.48xlarge: its links name host devices it cannot see.
    (d,) = validate_inventory([dev(5, external=("neuron:1", "neuron:4"))])
    assert dump_fields(d)["external_peers"] == ["neuron:1", "neuron:4"]
    assert dump_fields(d)["peers"] == []


@pytest.mark.parametrize("external", ["neuron:1", "neuron:0"])
def test_an_external_peer_that_is_on_the_host_is_refused(external: str) -> None:
    with pytest.raises(DeviceError, match=f"lists {external!r} as external, but it is on this host"):
        validate_inventory([dev(0, external=(external,)), dev(1)])


def test_host_warnings_are_in_the_json() -> None:
    info = HostInfo(
        plugin="neuron",
        family=FAMILY_NEURON,
        accelerator_type=None,
        resource_name="neuron_cores",
        visible_ids_env="NEURON_RT_VISIBLE_CORES",
        device_count=1,
        core_count=2,
        warnings=("w",),
    )
    assert dump_fields(info)["warnings"] == ["w"]


def plain_dev(
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
        ([plain_dev(0), plain_dev(1, id="d:0")], "duplicate device id 'd:0'"),
        ([plain_dev(0), plain_dev(0, id="d:9", cores=(9,))], "duplicate device index 0 (device 'd:9')"),
        ([plain_dev(0, cores=())], "device 'd:0' has no cores"),
        ([plain_dev(0, memory_bytes=-1)], "device 'd:0' has negative memory -1"),
        ([plain_dev(0, cores=(-2,))], "device 'd:0' has negative core id -2"),
        ([plain_dev(0, cores=(0, 1)), plain_dev(1)], "core 1 belongs to both 'd:0' and 'd:1'"),
        ([plain_dev(0, peers=("d:0",))], "device 'd:0' lists itself as a peer"),
        ([plain_dev(0, peers=("d:7",))], "device 'd:0' names unknown peer 'd:7'"),
        ([plain_dev(0, peers=("d:1",)), plain_dev(1)], "link 'd:0' -> 'd:1' is one-sided: 'd:1' does not list 'd:0'"),
    ],
)
def test_an_inventory_that_cannot_be_true_is_refused_naming_the_device(devices: list[Device], message: str) -> None:
    with pytest.raises(DeviceError, match=f"^{re.escape(message)}$"):
        validate_inventory(devices)


def test_linked_devices_in_any_order_are_the_inventory_by_index() -> None:
    got = validate_inventory([plain_dev(1, peers=("d:0",)), plain_dev(0, peers=("d:1",))])
    assert [d.id for d in got] == ["d:0", "d:1"]
