"""A training worker's environment, as the train layer hands it over (unit):
the runtime decides from the whole job and its collective, and refuses a
collective it cannot make or a job it cannot run with it."""

from __future__ import annotations

import pytest
from ray_accel_cuda.runtime import CudaRuntime
from ray_accel_neuron.runtime import NeuronRuntime
from ray_accel_neuron.stacks import Stacks

from ray_accel.core.errors import InputError
from ray_accel.plugins.interface import GlooRuntime, Runtime
from ray_accel.plugins.runtime import WorkerSlot
from ray_accel.train.ranks import assign_ranks
from ray_accel.train.worker import WorkerFacts, WorkerSetup


def setup(per_worker: int, collective: str, index: int = 0) -> WorkerSetup:
    raylets = ["p0", "p0", "p1", "p1"]
    job = tuple(
        WorkerSlot(
            rank=p,
            node_id=r,
            own_ids=tuple(str(i * per_worker + k) for k in range(per_worker)),
            master_addr="10.0.0.1",
            master_port=29500,
            comm_port=29501,
        )
        for i, (p, r) in enumerate(zip(assign_ranks(raylets), raylets, strict=True))
    )
    facts = WorkerFacts(
        node_id=job[index].node_id,
        ip="10.0.0.1",
        host="h",
        pid=1,
        partition=None,
        family="neuron",
        visible_ids_env="NEURON_RT_VISIBLE_CORES",
        accelerator_type=None,
        own_ids=(),
        collective=collective,
    )
    return WorkerSetup("run", index, job, facts, collective)


def worker_env(s: WorkerSetup, runtime: Runtime) -> dict[str, str]:
    """What `prepare` sets: the runtime's environment for this worker's slot of the job."""
    return runtime.worker_env(s.slot, s.job, s.collective)


# A worker with torch-xla and without TorchNeuron (the legacy stack).
XLA_ONLY = Stacks(torchneuron="not installed (in this test)", xla=None)


def neuron(pjrt_device: str) -> NeuronRuntime:
    return NeuronRuntime(
        pjrt_device=pjrt_device, fallback=None if pjrt_device == "NEURON" else "gloo", probe=lambda: XLA_ONLY
    )


def test_xla_on_neuron_refuses_workers_holding_more_than_one_core() -> None:
    """torch-xla 2.9 outside SPMD runs a process on its first device only
    (torch_xla.py:19-49): a second core per worker is a replica that never runs."""
    with pytest.raises(InputError, match=r"worker rank 0 holds 2 \(0, 1\).*'neuron_cores': 1.*backend='gloo'"):
        worker_env(setup(2, "xla"), neuron("NEURON"))
    env = worker_env(setup(1, "xla", index=3), neuron("NEURON"))
    assert env["PJRT_DEVICE"] == "NEURON" and env["NEURON_RT_VISIBLE_CORES"] == "3"
    assert env["NEURON_PJRT_PROCESS_INDEX"] == "3" and env["NEURON_PJRT_PROCESSES_NUM_DEVICES"] == "1,1,1,1"


@pytest.mark.parametrize(("pjrt", "backend"), [("NEURON", "gloo"), ("CPU", "xla")])
def test_several_cores_per_worker_are_fine_outside_the_xla_group(pjrt: str, backend: str) -> None:
    """gloo (e.g. for SPMD) on Neuron, and the mock's PJRT CPU, whose xla jobs
    reduce through gloo."""
    env = worker_env(setup(2, backend, index=1), neuron(pjrt))
    assert env["NEURON_RT_VISIBLE_CORES"] == "2-3" and env["PJRT_DEVICE"] == pjrt


@pytest.mark.parametrize(
    ("runtime", "collective", "who"),
    [
        (neuron("NEURON"), "nccl", "the Neuron runtime"),
        (CudaRuntime(), "xla", "the CUDA runtime"),
        (GlooRuntime("NEURON_RT_VISIBLE_CORES"), "xla", "a worker without an accelerator runtime"),
        (GlooRuntime(None), "nccl", "a worker without an accelerator runtime"),
    ],
)
def test_a_collective_the_runtime_cannot_make_is_refused_naming_both(
    runtime: Runtime, collective: str, who: str
) -> None:
    with pytest.raises(InputError, match=f"backend '{collective}' cannot be made by {who}: it makes"):
        worker_env(setup(1, collective), runtime)


def test_without_a_runtime_a_worker_sees_exactly_its_own_ids_and_trains_on_gloo() -> None:
    env = worker_env(setup(2, "gloo", index=2), GlooRuntime("NEURON_RT_VISIBLE_CORES"))
    assert env["NEURON_RT_VISIBLE_CORES"] == "4,5" and env["RANK"] == "2"
    bare = worker_env(setup(2, "gloo", index=2), GlooRuntime(None))
    assert "NEURON_RT_VISIBLE_CORES" not in bare and bare["LOCAL_RANK"] == "0"
    assert GlooRuntime(None).collective_backend("Trainium2").collective == "gloo"
