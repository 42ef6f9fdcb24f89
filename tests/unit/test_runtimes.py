"""Per family, the runtime decides what each training worker sees.

CUDA: the workers of a raylet share its GPUs (sorted union), NCCL peers.
Neuron: each process opens exactly its own cores (checked against a fake of
the Neuron runtime's and PJRT's own rules, tests/fakes/neuron_runtime.py).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray_accel_cuda.runtime import CudaRuntime
from ray_accel_mock import MockPlugin, load_spec
from ray_accel_neuron.runtime import NeuronRuntime

from ray_accel.plugins.runtime import RankInfo, WorkerSlot, raylet_union
from ray_accel.train.ranks import assign_ranks
from tests.fakes.neuron_runtime import NeuronRuntimeError, start_job


def job(raylets: list[str], own: list[list[int]]) -> list[WorkerSlot]:
    return [
        WorkerSlot(
            RankInfo(p.world_rank, p.world_size, p.local_rank, p.local_world_size, p.node_rank, "10.0.0.1", 29500),
            raylet,
            tuple(map(str, ids)),
        )
        for p, raylet, ids in zip(assign_ranks(raylets), raylets, own, strict=True)
    ]


def trn1_job(cores_per_worker: int) -> list[WorkerSlot]:
    """Mock trn1.32xlarge split in 2 (p0: cores 0-15, p1: 16-31), 2 workers per
    partition, each granted a block the way Ray's per-instance slots give it."""
    plan = {"p0": range(0, 16), "p1": range(16, 32)}
    own = []
    raylets = []
    for part, cores in plan.items():
        for w in range(2):
            raylets.append(part)
            own.append(list(cores)[w * cores_per_worker : (w + 1) * cores_per_worker])
    return job(raylets, own)


@pytest.mark.parametrize(("per_worker", "counts"), [(2, "2,2,2,2"), (1, "1,1,1,1")])
def test_neuron_each_process_ends_with_exactly_its_own_cores(per_worker: int, counts: str) -> None:
    slots = trn1_job(per_worker)
    runtime = NeuronRuntime()  # PJRT_DEVICE=NEURON forced; no group is initialised here
    envs = [runtime.worker_env(w, slots) for w in slots]
    assert all(e["PJRT_DEVICE"] == "NEURON" for e in envs)
    assert [e["NEURON_PJRT_PROCESSES_NUM_DEVICES"] for e in envs] == [counts] * 4
    opened = start_job(envs)
    for w in slots:
        assert opened[w.rank.world_rank] == [int(i) for i in w.own_ids], "exactly its own cores"
    assert [e["NEURON_RT_VISIBLE_CORES"] for e in envs][:2] == (["0-1", "2-3"] if per_worker == 2 else ["0", "1"]), (
        "a contiguous grant is one range"
    )


def test_the_old_shared_union_is_refused_by_the_fake_runtime() -> None:
    """What the code did before: each local worker got the raylet's union."""
    slots = trn1_job(2)
    envs = []
    for w in slots:
        env = NeuronRuntime().worker_env(w, slots)
        env["NEURON_RT_VISIBLE_CORES"] = ",".join(raylet_union(w, slots))
        env["NEURON_PJRT_PROCESSES_NUM_DEVICES"] = ",".join(["2"] * 4)
        envs.append(env)
    with pytest.raises(NeuronRuntimeError):
        start_job(envs)


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 4)), min_size=1, max_size=8))
def test_neuron_any_job_opens_disjoint_cores_and_counts_match(rows: list[tuple[str, int]]) -> None:
    own, nxt = [], 0
    for _, n in rows:
        own.append(list(range(nxt, nxt + n)))
        nxt += n
    slots = job([r for r, _ in rows], own)
    envs = [NeuronRuntime().worker_env(w, slots) for w in slots]
    opened = start_job(envs)
    assert sum(len(c) for c in opened.values()) == nxt
    assert {e["NEURON_RT_ROOT_COMM_ID"] for e in envs} == {"10.0.0.1:29501"}, "rank 0's host, one root"


@given(
    st.lists(
        st.tuples(st.sampled_from("ab"), st.lists(st.integers(0, 40), max_size=3, unique=True)), min_size=1, max_size=8
    )
)
def test_cuda_workers_of_a_raylet_share_its_sorted_union(rows: list[tuple[str, list[int]]]) -> None:
    slots = job([r for r, _ in rows], [ids for _, ids in rows])
    runtime = CudaRuntime()
    for w in slots:
        env = runtime.worker_env(w, slots)
        union = sorted({i for s in slots if s.raylet == w.raylet for i in map(int, s.own_ids)})
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, union)), "numeric order, not string order"
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID", "ordinals mean NVML's (PCI bus) order"
        assert env["LOCAL_WORLD_SIZE"] == str(sum(1 for s in slots if s.raylet == w.raylet))


def test_cuda_uuid_masks_keep_their_tokens() -> None:
    slots = job(["a", "a"], [[], []])
    slots = [WorkerSlot(s.rank, s.raylet, (f"GPU-{i}",)) for i, s in enumerate(slots)]
    assert CudaRuntime().worker_env(slots[1], slots)["CUDA_VISIBLE_DEVICES"] == "GPU-0,GPU-1"


def test_the_mock_trains_on_cpu_with_its_familys_real_rules() -> None:
    neuron = MockPlugin(load_spec("trn1.32xlarge")).runtime
    gpu = MockPlugin(load_spec("p4d.24xlarge")).runtime
    assert isinstance(neuron, NeuronRuntime) and isinstance(gpu, CudaRuntime)
    assert neuron.collective_backend() == gpu.collective_backend() == "gloo"
    slots = trn1_job(2)
    envs = [neuron.worker_env(w, slots) for w in slots]
    assert all(e["PJRT_DEVICE"] == "CPU" for e in envs)
    start_job(envs)
