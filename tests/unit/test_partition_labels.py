"""The partition labels: the id-set codec is held to Ray 2.60's own label
validation (`ray._private.label_utils`), and the topology labels of every
planned partition describe links both ways and name its host by name and IP (the
host key's own properties: `test_host_keys.py`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray._private.label_utils import parse_node_labels_string, validate_label_value, validate_node_label_syntax
from ray_accel_mock.spec import load_spec

from ray_accel.core.devices import Device
from ray_accel.core.hosts import HostId
from ray_accel.core.visibility import format_visible_ids
from ray_accel.partition.plan import (
    CONNECTED_LABEL,
    CORES_LABEL,
    DEVICES_LABEL,
    HOST_LABEL,
    LINKS_LABEL,
    LabelError,
    decode_ids,
    encode_ids,
    topology_labels,
)
from tests.planning import plan_for
from tests.strategies import host_and_partition_count


@given(st.sets(st.integers(0, 2000), max_size=80))
def test_id_sets_round_trip_or_are_left_out(ids: set[int]) -> None:
    text = encode_ids(ids)
    if text is None:
        assert not ids or len(format_visible_ids(sorted(ids), "ranges")) > 63, "left out only when empty or too long"
        return
    validate_label_value(text)  # Ray's own check raises on a bad value
    assert len(text) <= 63
    assert decode_ids(text) == tuple(sorted(ids))


@given(st.text(max_size=20))
def test_a_bad_id_set_is_refused_naming_it(text: str) -> None:
    try:
        ids = decode_ids(text)
    except LabelError as e:
        assert repr(text) in str(e)
        return
    assert ids and list(ids) == sorted(set(ids)), "only a well-formed set decodes"
    assert encode_ids(ids) is None or decode_ids(encode_ids(ids) or "") == ids


@pytest.mark.parametrize("text", ["", "3-1", "1,2", "a", "1__2", "-1", "1-", "2_2"])
def test_examples_of_bad_id_sets(text: str) -> None:
    with pytest.raises(LabelError, match="bad id set label value"):
        decode_ids(text)


@given(host_and_partition_count())
def test_topology_labels_are_valid_and_links_are_mutual(case: tuple[tuple[Device, ...], int]) -> None:
    devices, count = case
    plan = plan_for(devices, "auto-split", count)
    labels = topology_labels(plan.partitions, devices, HostId("host-a", "10.0.0.1"), devices[0].family, "neuron_cores")
    assert set(labels) == {p.name for p in plan.partitions}
    assert {lab[HOST_LABEL] for lab in labels.values()} == {"host-a_10.0.0.1"}
    owned: dict[int, str] = {}
    for p in plan.partitions:
        lab = labels[p.name]
        validate_node_label_syntax(lab)
        # What `ray start --labels` would parse back.
        assert parse_node_labels_string(",".join(f"{k}={v}" for k, v in lab.items())) == lab
        if CORES_LABEL in lab:
            assert decode_ids(lab[CORES_LABEL]) == p.core_ids
        for i in decode_ids(lab[DEVICES_LABEL]) if DEVICES_LABEL in lab else ():
            owned[i] = p.name
    for p in plan.partitions:
        links = labels[p.name].get(LINKS_LABEL)
        for i in decode_ids(links) if links else ():
            other = labels[owned[i]]
            mine = set(decode_ids(labels[p.name][DEVICES_LABEL]))
            assert mine & set(decode_ids(other[LINKS_LABEL])), f"{p.name} links to {owned[i]} but not back"


def test_trn1_split_in_four_links_neighbouring_rows_of_the_torus() -> None:
    spec = load_spec("trn1.32xlarge")
    plan = plan_for(spec.devices, "auto-split", 4)
    labels = topology_labels(plan.partitions, spec.devices, HostId("h", "10.0.0.1"), "neuron", "neuron_cores")
    # Rows of the 4x4 torus: device 0 links to 1, 3, 4 and 12 (Neuron docs, trn1 topology).
    assert labels["p0"][DEVICES_LABEL] == "0-3" and labels["p0"][CORES_LABEL] == "0-7"
    assert labels["p0"][LINKS_LABEL] == "4-7_12-15", "p0 links to p1 and p3, not p2"
    assert labels["p2"][LINKS_LABEL] == "4-7_12-15"
    assert all(lab[CONNECTED_LABEL] == "true" for lab in labels.values())
