"""Per family, the runtime decides what each training worker sees.

CUDA: the workers of a raylet share its GPUs (sorted union), NCCL peers.
Neuron: each process opens exactly its own cores (checked against a fake of
torch-xla 2.9's start-up, PJRT's process layout and the Neuron runtime's
one-process-per-core rule, tests/fakes/neuron_runtime.py; the XLA lane runs
torch-xla's own functions on the same environments,
tests/integration/test_xla_neuron_start.py).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray_accel_cuda.runtime import CudaRuntime
from ray_accel_mock import MockPlugin, load_spec
from ray_accel_neuron.runtime import NeuronRuntime

from ray_accel.plugins.runtime import GLOO, WorkerSlot, raylet_union
from ray_accel.train.ranks import assign_ranks
from tests.fakes.neuron_runtime import NeuronRuntimeError, start_job, torch_xla_start, visible_cores


def job(raylets: list[str], own: list[list[int]]) -> list[WorkerSlot]:
    return [
        WorkerSlot(rank=p, node_id=raylet, own_ids=tuple(map(str, ids)), master_addr="10.0.0.1", master_port=29500)
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
    envs = [runtime.worker_env(w, slots, GLOO) for w in slots]
    assert all(e["PJRT_DEVICE"] == "NEURON" for e in envs)
    assert [e["NEURON_PJRT_PROCESSES_NUM_DEVICES"] for e in envs] == [counts] * 4
    opened = start_job(envs)
    for w in slots:
        assert opened[w.rank.world_rank] == [int(i) for i in w.own_ids], "exactly its own cores"
    assert [e["NEURON_RT_VISIBLE_CORES"] for e in envs][:2] == (["0-1", "2-3"] if per_worker == 2 else ["0", "1"]), (
        "a contiguous grant is one range"
    )


@pytest.mark.parametrize("per_worker", [2, 1])
def test_neuron_env_keeps_torch_xla_from_rewriting_it(per_worker: int) -> None:
    """No TORCHELASTIC_RUN_ID (it makes torch-xla remap every process to one
    core, _internal/neuron.py:58-81), one PJRT layout variable (never
    NEURON_PJRT_WORLD_SIZE beside the counts), PJRT's local process rank and
    count per raylet (runtime.py:96-99, 143-149)."""
    slots = trn1_job(per_worker)
    for w in slots:
        env = NeuronRuntime().worker_env(w, slots, GLOO)
        assert "TORCHELASTIC_RUN_ID" not in env and "NEURON_PJRT_WORLD_SIZE" not in env
        assert env["PJRT_LOCAL_PROCESS_RANK"] == str(w.rank.local_rank) == env["LOCAL_RANK"]
        assert env["PJRT_LOCAL_PROCESS_COUNT"] == "2" == env["LOCAL_WORLD_SIZE"]
        assert torch_xla_start(env) == env, "torch-xla's start-up leaves it as it is"


@pytest.mark.parametrize("per_worker", [2, 1])
def test_torchelastic_would_break_the_per_process_env(per_worker: int) -> None:
    """Why no hook may set TORCHELASTIC_RUN_ID: with it torch-xla narrows a
    2-core worker to one core (PJRT still says 2) and refuses a 1-core worker
    whose LOCAL_WORLD_SIZE is 2 (the r2-xla matrix rows per-process-*-torchelastic)."""
    slots = trn1_job(per_worker)
    envs = [{**NeuronRuntime().worker_env(w, slots, GLOO), "TORCHELASTIC_RUN_ID": "x"} for w in slots]
    with pytest.raises(NeuronRuntimeError, match="says it has 2 cores but opens 1" if per_worker == 2 else "not equal"):
        start_job(envs)


def test_ray_v1s_union_with_torchelastic_is_remapped_for_one_core_only() -> None:
    """Ray V1's TorchXLAConfig path, modelled by the fake as torch-xla runs it
    (matrix rows current-1core-torchelastic: exact; current-2core-torchelastic:
    ValueError): the raylet's union, TORCHELASTIC_RUN_ID set, no PJRT layout."""
    for per_worker, works in ((1, True), (2, False)):
        slots = trn1_job(per_worker)
        envs = []
        for w in slots:
            env = {
                k: v for k, v in NeuronRuntime().worker_env(w, slots, GLOO).items() if not k.startswith("NEURON_PJRT")
            }
            env.update({"NEURON_RT_VISIBLE_CORES": ",".join(raylet_union(w, slots)), "TORCHELASTIC_RUN_ID": "x"})
            envs.append(env)
        if works:
            opened = start_job(envs)
            assert [opened[w.rank.world_rank] for w in slots] == [[int(i) for i in w.own_ids] for w in slots]
        else:
            with pytest.raises(NeuronRuntimeError, match="not equal to count 4"):
                start_job(envs)


@pytest.mark.parametrize(
    ("value", "cores"),
    [("0-3,8", [0, 1, 2, 3, 8]), ("8,0-1", [8, 0, 1]), (" 3", [3]), ("0-3,2", None), ("1,1", None), ("0,,1", None),
     ("3-1", None), ("-1", None), ("a", None), ("0-1-2", None), ("1,", None)],
)  # fmt: skip
def test_fake_reads_visible_cores_as_torch_xla_does(value: str, cores: list[int] | None) -> None:
    """torch_xla/_internal/neuron_utils.py:8-43: given order, no overlap."""
    if cores is None:
        with pytest.raises(NeuronRuntimeError):
            visible_cores(value)
    else:
        assert visible_cores(value) == cores


def test_fake_refuses_two_layouts_and_defaults_the_root() -> None:
    slots = trn1_job(1)
    envs = [NeuronRuntime().worker_env(w, slots, GLOO) for w in slots]
    with pytest.raises(NeuronRuntimeError, match="both"):
        start_job([{**e, "NEURON_PJRT_WORLD_SIZE": "4"} for e in envs])
    # One core per process: NEURON_PJRT_WORLD_SIZE alone is a valid layout.
    no_counts = [{k: v for k, v in e.items() if k != "NEURON_PJRT_PROCESSES_NUM_DEVICES"} for e in envs]
    start_job([{**e, "NEURON_PJRT_WORLD_SIZE": "4"} for e in no_counts])
    # Without a root, torch-xla picks MASTER_ADDR:62182 in every process.
    no_root = [{k: v for k, v in e.items() if k != "NEURON_RT_ROOT_COMM_ID"} for e in envs]
    assert {torch_xla_start(e)["NEURON_RT_ROOT_COMM_ID"] for e in no_root} == {"10.0.0.1:62182"}
    start_job(no_root)


def test_the_old_shared_union_is_refused_by_the_fake_runtime() -> None:
    """What the code did before: each local worker got the raylet's union."""
    slots = trn1_job(2)
    envs = []
    for w in slots:
        env = NeuronRuntime().worker_env(w, slots, GLOO)
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
    envs = [NeuronRuntime().worker_env(w, slots, GLOO) for w in slots]
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
        env = runtime.worker_env(w, slots, GLOO)
        union = sorted({i for s in slots if s.node_id == w.node_id for i in map(int, s.own_ids)})
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, union)), "numeric order, not string order"
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID", "ordinals mean NVML's (PCI bus) order"
        assert env["LOCAL_WORLD_SIZE"] == str(sum(1 for s in slots if s.node_id == w.node_id))


def test_cuda_uuid_masks_keep_their_tokens() -> None:
    slots = job(["a", "a"], [[], []])
    slots = [dataclasses.replace(s, own_ids=(f"GPU-{i}",)) for i, s in enumerate(slots)]
    assert CudaRuntime().worker_env(slots[1], slots, "nccl")["CUDA_VISIBLE_DEVICES"] == "GPU-0,GPU-1"


def test_the_mock_trains_on_cpu_with_its_familys_real_rules() -> None:
    neuron = MockPlugin(load_spec("trn1.32xlarge")).runtime
    gpu = MockPlugin(load_spec("p4d.24xlarge")).runtime
    assert isinstance(neuron, NeuronRuntime) and isinstance(gpu, CudaRuntime)
    assert neuron.collective_backend("Trainium").collective == gpu.collective_backend("A100").collective == "gloo"
    slots = trn1_job(2)
    envs = [neuron.worker_env(w, slots, GLOO) for w in slots]
    assert all(e["PJRT_DEVICE"] == "CPU" for e in envs)
    start_job(envs)
