"""Ray's node table as `gcs.gcs_nodes` returns it, for the tests of `status`
and its `--json` output: two hosts of two partitions (one raylet dead) and a
plain node; a partition raylet as `top` gets it."""

from __future__ import annotations

from ray_accel.cluster.status import ClusterPartition, HostStatus
from ray_accel.core.hosts import host_key
from ray_accel.partition.plan import CORES_LABEL, DEVICES_LABEL, HOST_LABEL, PARTITION_LABEL, RESOURCE_LABEL, TYPE_LABEL
from ray_accel.rayapi.gcs import GcsNode


def node(
    host: str | None, part: str | None, ip: str, alive: bool = True, cores: str | None = "0-15", label: bool = True
) -> GcsNode:
    """One entry as `gcs.gcs_nodes` returns it (Ray 2.60 node table + resources),
    of a raylet that `start` gave the labels it gives (`label`: the host label too)."""
    labels = {"ray.io/node-id": "x"}
    if part is not None:
        labels[PARTITION_LABEL] = part
        labels[RESOURCE_LABEL] = "neuron_cores"
        labels[TYPE_LABEL] = "Trainium"
        labels[DEVICES_LABEL] = "0-7"
        if cores is not None:
            labels[CORES_LABEL] = cores
    if host is not None and label:
        labels[HOST_LABEL] = host_key(host, ip)
    return GcsNode(
        node_id="",  # the table's key names it
        alive=alive,
        labels=labels,
        ip=ip,
        hostname=host if host is not None else f"name-of-{ip}",
        total={"neuron_cores": 16.0, "CPU": 1.0, f"node:{ip}": 1.0, "memory": 1e9},
        available={"neuron_cores": 12.0, "CPU": 0.0, f"node:{ip}": 1.0, "memory": 1e9},
    )


NODES = {
    "n4": node("hb", "p1", "10.0.0.2", cores="16-31"),
    "n1": node("ha", "p0", "10.0.0.1"),
    "n3": node("hb", "p0", "10.0.0.2", alive=False),
    "n2": node("ha", "p1", "10.0.0.1", cores="16-31"),
    "plain": node(None, None, "10.0.0.3"),
}


def raylet_row(partition: str, host: str, ip: str, node_id: str, alive: bool) -> ClusterPartition:
    """A partition raylet as `top` gets it, with only what `top` shows."""
    return ClusterPartition(
        host=host,
        host_name=host,
        partition=partition,
        node_id=node_id,
        ip=ip,
        alive=alive,
        resource=None,
        accelerator_type=None,
        core_ids=None,
        mask=None,
        device_indexes=None,
        total={},
        available={},
    )


def running_host_status() -> HostStatus:
    """A running host with a live GCS and no partitions, for the tests that add their own."""
    return HostStatus(
        running=True,
        host="hostA",
        host_ip=None,
        state_file="/x",
        state_dir="/",
        gcs_address="10.0.0.1:6379",
        gcs_alive=True,
        dashboard_address=None,
    )
