"""The live view and the ScalingConfig builder, against what Ray 2.60 really
returns: `tests/fixtures/ray/nodes-trn1.32xlarge-4.json` is `ray.nodes()` and
`ray._private.state.available_resources_per_node()` captured verbatim from a
Ray 2.60.0 cluster that `ray-accel start` made (its "source" field says how),
and the ScalingConfig is Ray Train V2's own class, with its own validation."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from ray.train import ScalingConfig

from ray_accel.partition.plan import FAMILY_LABEL, HOST_LABEL, PARTITION_LABEL, RESOURCE_LABEL
from ray_accel.placement.live import NODE_ID_LABEL, view_from_nodes
from ray_accel.placement.model import Job, PlacementError
from ray_accel.placement.scaling import new_job, place, scaling_config, scaling_configs, to_scaling_config

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "ray" / "nodes-trn1.32xlarge-4.json"


def captured() -> tuple[list[dict[str, Any]], dict[str, dict[str, float]]]:
    data = json.loads(FIXTURE.read_text())
    return data["nodes"], data["available"]


# The captured raylets' host (its name and node IP), and a second host of the same name.
VM, VM2 = "vm_192.0.2.2", "vm_192.0.2.3"


def two_hosts() -> tuple[list[dict[str, Any]], dict[str, dict[str, float]]]:
    """The captured host and a copy of it as another host of the same name
    `vm`, at 192.0.2.3 (new node ids), both with the host label `start` gives
    now (the capture predates the IP in it)."""
    nodes, avail = captured()
    for n in nodes:
        n["Labels"] = {**n["Labels"], HOST_LABEL: VM}
    more = copy.deepcopy(nodes)
    for n in more:
        old = n["NodeID"]
        n["NodeID"] = "f" + old[1:]
        n["NodeManagerAddress"] = "192.0.2.3"
        n["Labels"] = {**n["Labels"], HOST_LABEL: VM2, NODE_ID_LABEL: n["NodeID"]}
        avail["f" + old[1:]] = {**avail[old], "neuron_cores": n["Resources"]["neuron_cores"]}
    return nodes + more, avail


def test_the_live_view_reads_ray_nodes() -> None:
    view = view_from_nodes(*captured())
    assert [(p.host, p.name, p.free, p.total) for p in view.partitions] == [
        (VM, "p0", 8, 8), (VM, "p1", 4, 8), (VM, "p2", 8, 8), (VM, "p3", 8, 8)
    ]  # fmt: skip
    p1 = view.partitions[1]
    assert p1.core_ids == tuple(range(8, 16)) and p1.device_ids == (4, 5, 6, 7)
    assert p1.links == frozenset({0, 1, 2, 3, 8, 9, 10, 11}) and p1.connected is True
    assert view.families() == [("neuron", "neuron_cores")]
    # One host: the partition label alone names each raylet.
    assert view.selectors[(VM, "p2")] == {PARTITION_LABEL: "p2"}


def test_dead_raylets_and_plain_ray_nodes_are_not_partitions() -> None:
    nodes, avail = captured()
    nodes[0]["Alive"] = False
    nodes.append({"NodeID": "ab" * 28, "Alive": True, "Resources": {"CPU": 4.0}, "Labels": {}})
    view = view_from_nodes(nodes, avail)
    assert len(view.partitions) == 3


def test_a_raylet_missing_from_the_available_table_has_nothing_free() -> None:
    nodes, avail = captured()
    del avail[nodes[0]["NodeID"]]
    view = view_from_nodes(nodes, avail)
    assert next(p for p in view.partitions if p.node_id == nodes[0]["NodeID"]).free == 0


def test_a_raylet_without_topology_labels_still_counts_as_unknown() -> None:
    nodes, avail = captured()
    kept = (PARTITION_LABEL, FAMILY_LABEL, RESOURCE_LABEL)
    for n in nodes:
        n["Labels"] = {k: v for k, v in n["Labels"].items() if k in kept or k.startswith("ray.io/")}
    view = view_from_nodes(nodes, avail)
    assert {p.host for p in view.partitions} == {VM}, "the host as Ray records it: name and node IP"
    assert all(p.core_ids == () and p.connected is None for p in view.partitions)
    assert view.families() == [("neuron", "neuron_cores")], "from the labels the backend's start wrote"
    a = place(new_job(2, 8, view), "topology", view)
    assert not a.connected and not a.aligned, "nothing known is nothing promised"


@pytest.mark.parametrize("missing", [FAMILY_LABEL, RESOURCE_LABEL])
def test_a_partition_that_does_not_say_what_it_serves_is_left_out_and_named(missing: str) -> None:
    """Which accelerator a raylet serves is what ray-accel's labels say, never
    guessed from resource names; a raylet without them is named, not placed on."""
    nodes, avail = captured()
    del nodes[0]["Labels"][missing]
    view = view_from_nodes(nodes, avail)
    assert nodes[0]["NodeID"] not in {p.node_id for p in view.partitions} and len(view.partitions) == 3
    name = nodes[0]["Labels"][PARTITION_LABEL]
    assert view.ignored == (
        f"partition {name} (node {nodes[0]['NodeID']}) has no {missing} label: what it serves is unknown",
    )


def test_same_partition_names_on_two_hosts_of_one_name_add_the_host_to_the_selector() -> None:
    view = view_from_nodes(*two_hosts())
    assert len(view.partitions) == 8 and {p.host for p in view.partitions} == {VM, VM2}
    assert view.selectors[(VM2, "p0")] == {PARTITION_LABEL: "p0", HOST_LABEL: VM2}
    assert view.selectors[(VM, "p0")] == {PARTITION_LABEL: "p0", HOST_LABEL: VM}
    for old_label in (None, "vm"):  # no host label, or an earlier one (the name alone): Ray's node id instead
        nodes, avail = two_hosts()
        for n in nodes:
            n["Labels"].pop(HOST_LABEL)
            if old_label is not None:
                n["Labels"][HOST_LABEL] = old_label
        view = view_from_nodes(nodes, avail)
        sel = view.selectors[(VM2, "p0")]
        assert sel == {PARTITION_LABEL: "p0", NODE_ID_LABEL: sel[NODE_ID_LABEL]} and sel[NODE_ID_LABEL].startswith("f")


def test_scaling_config_has_one_selector_per_worker_and_the_units_each_asks() -> None:
    view = view_from_nodes(*captured())
    sc = scaling_config(2, 8, name="a", view=view)
    assert isinstance(sc, ScalingConfig)
    assert sc.num_workers == 2 and sc.resources_per_worker == {"neuron_cores": 8}
    assert not sc.use_gpu
    parts = [s[PARTITION_LABEL] for s in sc.label_selector]
    assert len(parts) == 2 and len(set(parts)) == 2 and "p1" not in parts, "two whole partitions"
    # What Ray Train will hand its placement group (ray/train/v2/api/config.py).
    assert sc._label_selector_per_worker(2) == sc.label_selector
    cpu = scaling_config(1, 4, view=view, cpus_per_worker=1)
    assert cpu.resources_per_worker == {"neuron_cores": 4, "CPU": 1}


def test_ray_itself_refuses_a_selector_list_of_the_wrong_length() -> None:
    # The constraint the builder follows, checked against Ray's own class.
    with pytest.raises(ValueError, match="same length as"):
        ScalingConfig(num_workers=2, label_selector=[{PARTITION_LABEL: "p0"}])


def test_a_gpu_job_asks_for_gpus_the_way_ray_train_wants() -> None:
    nodes, avail = captured()
    for n in nodes:
        n["Resources"]["GPU"] = n["Resources"].pop("neuron_cores")
        n["Labels"].update({"ray-accel.io/family": "gpu", "ray-accel.io/resource": "GPU"})
        avail[n["NodeID"]]["GPU"] = avail[n["NodeID"]].pop("neuron_cores")
    sc = scaling_config(1, 2, view=view_from_nodes(nodes, avail))
    assert sc.use_gpu and sc.resources_per_worker == {"GPU": 2}


def test_a_job_larger_than_the_free_devices_is_refused_before_anything_starts() -> None:
    view = view_from_nodes(*captured())
    with pytest.raises(PlacementError) as e:
        scaling_config(4, 8, name="too-big", view=view)
    assert e.value.largest_workers == 3
    assert "the largest job of 8 neuron_cores per worker that fits is 3 worker(s) (24 neuron_cores)" in str(e.value)
    with pytest.raises(PlacementError, match="fits is 0 worker"):
        scaling_config(1, 16, view=view)


def test_jobs_submitted_together_share_no_partition() -> None:
    view = view_from_nodes(*captured())
    jobs = [new_job(2, 4, view, name="a", job_id="a"), new_job(1, 8, view, name="b", job_id="b")]
    out = scaling_configs(jobs, "pack", view)
    seen = [{s[PARTITION_LABEL] for s in out[j][1].label_selector} for j in ("a", "b")]
    assert not seen[0] & seen[1]
    # In arrival order: a and b take two whole partitions, c (3 x 8) cannot fit in what is left.
    with pytest.raises(PlacementError, match=r"job 'c' .* \(after placing the other jobs of this batch\)"):
        scaling_configs([*jobs, new_job(3, 8, view, name="c", job_id="c")], "pack", view)


def test_the_builder_owns_placement_fields() -> None:
    view = view_from_nodes(*captured())
    a = place(
        Job(id="j", name="j", workers=1, devices_per_worker=1, family="neuron", resource="neuron_cores"), "pack", view
    )
    with pytest.raises(ValueError, match="label_selector is set by the placement"):
        to_scaling_config(a, view, label_selector={"x": "y"})
    with pytest.raises(ValueError, match="name family= and resource="):
        new_job(1, 1, view_from_nodes([], {}))
