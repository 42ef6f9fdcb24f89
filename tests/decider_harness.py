"""The health decider without Ray: a host record whose raylet is a stand-in
(`tests.stand_ins`), and a wait for what the decider does. The fixtures that
start the stand-ins and set a mock host's environment (`tag`, `spawn`, `env`)
are in tests/unit/conftest.py."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

from ray_accel_neuron.runtime import TRAITS as NEURON_TRAITS

from ray_accel.bridge.managers import BridgeSpec
from ray_accel.cluster import statedir
from ray_accel.cluster.auth import Auth
from ray_accel.cluster.host import port_blocks
from ray_accel.cluster.record import HostRecord, PartitionEntry
from ray_accel.core.health_state import HealthSettings
from tests.stand_ins import LOOPBACK

SPEC = BridgeSpec(
    resource_name="neuron_cores",
    visible_ids_env="NEURON_RT_VISIBLE_CORES",
    family="neuron",
    accelerator_type="Trainium",
    unit_ids=tuple(range(4)),
    backend="mock",
    traits=NEURON_TRAITS,
)


Spawn = Callable[[], "subprocess.Popen[bytes]"]


def record_of(raylet: object, health: HealthSettings | None) -> HostRecord:
    block = port_blocks(42000, [184])[0]
    part = PartitionEntry(
        name="p0", device_ids=("neuron:0",), core_ids=(0, 1), head=False, ports=block, processes=(raylet,)
    )  # type: ignore[arg-type]
    return HostRecord(
        host=statedir.host_name(),
        host_ip=LOOPBACK,
        created=time.time(),
        head=False,
        mode="auto-split",
        spec=SPEC,
        ray_args=(),
        gcs_address="127.0.0.1:1",
        gcs_port=None,
        auth=Auth("disabled", None, "test"),
        partitions=(part,),
        health=health,
    )


def wait_for(check: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError("not within the time given")
