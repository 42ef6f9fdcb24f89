"""The core device model's additions: external peers and host warnings."""

from __future__ import annotations

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
