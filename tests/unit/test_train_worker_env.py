"""A training worker's environment, as the train layer hands it over (unit)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from ray_accel_neuron.runtime import NeuronRuntime

from ray_accel.core.errors import InputError
from ray_accel.train.ranks import assign_ranks
from ray_accel.train.worker import worker_env


def setup(per_worker: int, backend: str, index: int = 0) -> dict[str, Any]:
    raylets = ["p0", "p0", "p1", "p1"]
    job = [
        {
            "rank": {
                "world_rank": p.world_rank,
                "world_size": p.world_size,
                "local_rank": p.local_rank,
                "local_world_size": p.local_world_size,
                "node_rank": p.node_rank,
                "master_addr": "10.0.0.1",
                "master_port": 29500,
                "comm_port": 29501,
            },
            "raylet": r,
            "own_ids": [str(i * per_worker + k) for k in range(per_worker)],
        }
        for i, (p, r) in enumerate(zip(assign_ranks(raylets), raylets, strict=True))
    ]
    return {"job": job, "index": index, "env": "NEURON_RT_VISIBLE_CORES", "backend": backend}


def plugin(pjrt_device: str) -> Any:
    collective = "xla" if pjrt_device == "NEURON" else "gloo"
    return SimpleNamespace(
        runtime=NeuronRuntime(pjrt_device=pjrt_device, collective=collective),
        visible_ids_env="NEURON_RT_VISIBLE_CORES",
    )


def test_xla_on_neuron_refuses_workers_holding_more_than_one_core() -> None:
    """torch-xla 2.9 outside SPMD runs a process on its first device only
    (torch_xla.py:19-49): a second core per worker is a replica that never runs."""
    with pytest.raises(InputError, match=r"worker rank 0 holds 2 \(0, 1\).*'neuron_cores': 1.*backend='gloo'"):
        worker_env(setup(2, "xla"), plugin("NEURON"))
    env = worker_env(setup(1, "xla", index=3), plugin("NEURON"))
    assert env["PJRT_DEVICE"] == "NEURON" and env["NEURON_RT_VISIBLE_CORES"] == "3"
    assert env["NEURON_PJRT_PROCESS_INDEX"] == "3" and env["NEURON_PJRT_PROCESSES_NUM_DEVICES"] == "1,1,1,1"


@pytest.mark.parametrize(("pjrt", "backend"), [("NEURON", "gloo"), ("CPU", "xla")])
def test_several_cores_per_worker_are_fine_outside_the_xla_group(pjrt: str, backend: str) -> None:
    """gloo (e.g. for SPMD) on Neuron, and the mock's PJRT CPU, whose xla jobs
    reduce through gloo."""
    env = worker_env(setup(2, backend, index=1), plugin(pjrt))
    assert env["NEURON_RT_VISIBLE_CORES"] == "2-3" and env["PJRT_DEVICE"] == pjrt
