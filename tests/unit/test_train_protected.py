"""What a hook may not set in a training worker.

Protected: every variable the family's runtime sets, the visibility variable
and Ray's switch for it, the rank variables, and what every installed
backend declares (its visibility and collectives' variables, even where this
family's runtime leaves them unset). The run is refused naming the variable
and the hook (tests/integration/test_train.py proves it with a real
TorchTrainer).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ray_accel_cuda.runtime import CudaRuntime
from ray_accel_neuron.runtime import NeuronRuntime

from examples.hooks import Recording
from ray_accel.hooks.config import Workload, WorkloadDenied
from ray_accel.hooks.run import HookRun
from ray_accel.plugins.runtime import Rank, WorkerSlot
from ray_accel.train.worker import protected_vars
from tests.integration.train_hooks import SetsEnv

SLOT = WorkerSlot(
    rank=Rank(1, 2, 1, 2, 0), node_id="raylet", own_ids=("2", "3"), master_addr="10.0.0.1", master_port=29500
)
JOB = [
    WorkerSlot(
        rank=Rank(0, 2, 0, 2, 0), node_id="raylet", own_ids=("0", "1"), master_addr="10.0.0.1", master_port=29500
    ),
    SLOT,
]


@pytest.fixture(autouse=True)
def _hook_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYACCEL_HOOK_DIR", str(tmp_path / "ledger"))


@pytest.mark.parametrize(
    ("runtime", "visible"),
    [(NeuronRuntime(), "NEURON_RT_VISIBLE_CORES"), (CudaRuntime(), "CUDA_VISIBLE_DEVICES"), (None, None)],
)
def test_every_runtime_variable_and_the_collectives_are_protected(runtime: object, visible: str | None) -> None:
    env = runtime.worker_env(SLOT, JOB, "gloo") if runtime is not None else {}  # type: ignore[attr-defined]
    protected = protected_vars(env, visible)
    assert set(env) <= protected
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "PJRT_DEVICE",
                 "NEURON_PJRT_PROCESS_INDEX", "NEURON_PJRT_PROCESSES_NUM_DEVICES", "NEURON_RT_ROOT_COMM_ID",
                 "TORCHELASTIC_RUN_ID", "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES",
                 "RAY_EXPERIMENTAL_NOSET_NEURON_RT_VISIBLE_CORES"):  # fmt: skip
        assert name in protected, name
    assert "NCCL_DEBUG" not in protected and "SCRATCH_DIR" not in protected, "tuning and the user's own stay open"


def test_a_third_party_visibility_variable_is_protected() -> None:
    protected = protected_vars({}, "ACME_VISIBLE_CHIPS")
    assert {"ACME_VISIBLE_CHIPS", "RAY_EXPERIMENTAL_NOSET_ACME_VISIBLE_CHIPS"} <= protected


@pytest.mark.parametrize("name", ["MASTER_PORT", "NEURON_PJRT_PROCESS_INDEX", "NEURON_RT_VISIBLE_CORES"])
def test_the_refusal_names_the_variable_and_the_hook_and_terminates(tmp_path: Path, name: str) -> None:
    log = tmp_path / "log"
    run = HookRun("r", Workload("w", "p0"), [Recording(str(log)), SetsEnv(name, "7")])
    env = NeuronRuntime().worker_env(SLOT, JOB, "gloo")
    with pytest.raises(WorkloadDenied, match=f"hook SetsEnv .*{name}"):
        run.pre_create(protected=protected_vars(env, "NEURON_RT_VISIBLE_CORES"))
    assert [line.split('"event": "')[1].split('"')[0] for line in log.read_text().splitlines()] == [
        "pre_create",
        "post_terminate",
    ]
