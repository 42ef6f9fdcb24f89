"""A valid host record, as `start` writes one: a head (GCS, raylet, client
server) and two partitions, for the tests of the record and of what reads it."""

from __future__ import annotations

from ray_accel.cluster.auth import Auth
from ray_accel.cluster.host import port_blocks
from ray_accel.cluster.record import HostRecord, PartitionEntry, RayProcess
from tests.bridge_specs import NEURON

SPEC = NEURON  # the Trainium host of tests/bridge_specs.py
RAY = "/venv/lib/python3.11/site-packages/ray"


def valid_record() -> HostRecord:
    blocks = port_blocks(21000, [184, 184, 300], client_server=True)
    head = PartitionEntry(
        name="head",
        device_ids=(),
        core_ids=(),
        head=True,
        ports=blocks[0],
        processes=(
            RayProcess("gcs_server", 4242, 1000, f"{RAY}/core/src/ray/gcs/gcs_server"),
            RayProcess("raylet", 4250, 1010, f"{RAY}/core/src/ray/raylet/raylet"),
            RayProcess("ray_client_server", 4251, 1011, "-m ray.util.client.server"),
        ),
        node_id="ab" * 28,
        node_ip="10.0.0.1",
        log="/state/head.log",
    )
    p0 = PartitionEntry(
        name="p0",
        device_ids=tuple(f"neuron:{i}" for i in range(8)),
        core_ids=tuple(range(16)),
        head=False,
        ports=blocks[1],
        processes=(RayProcess("raylet", 4260, 1020, f"{RAY}/core/src/ray/raylet/raylet"),),
        node_id="cd" * 28,
        node_ip="10.0.0.1",
        log="/state/p0.log",
    )
    worker = PartitionEntry(
        name="p1",
        device_ids=tuple(f"neuron:{i}" for i in range(8, 16)),
        core_ids=tuple(range(16, 32)),
        head=False,
        ports=blocks[2],
        processes=(RayProcess("raylet", 4300, 1100, f"{RAY}/core/src/ray/raylet/raylet"),),
    )
    return HostRecord(
        host="host-a",
        host_ip="10.0.0.1",
        created=1700000000.5,
        head=True,
        mode="auto-split",
        spec=SPEC,
        ray_args=("--temp-dir", "/data/ray"),
        gcs_address="10.0.0.1:6379",
        gcs_port=6379,
        auth=Auth("token", "/home/<user>/.ray/auth_token", "generated"),
        partitions=(p0, worker),
        metrics=True,
        head_raylet=head,
    )
