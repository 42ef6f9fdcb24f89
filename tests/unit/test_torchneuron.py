"""The `neuron` collective (TorchNeuron) beside `xla`, as the Neuron runtime
decides them (unit, no process group): what "auto" picks per generation and
installed stack and why, what `neuron` and `xla` need before they are made,
and each `neuron` worker's environment.

The fake TorchNeuron's own rules, and this runtime's environment against
them, run in subprocesses: tests/unit/test_fake_torchneuron.py."""

from __future__ import annotations

import importlib.util

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray_accel_mock import MockPlugin, load_spec
from ray_accel_neuron import xla
from ray_accel_neuron.runtime import EFA_ENV, NeuronRuntime
from ray_accel_neuron.stacks import Stacks, choose
from ray_accel_neuron.torchneuron import GENERATIONS, NEURON, UNSUPPORTED, stack_problem
from ray_accel_neuron.xla import XLA

from ray_accel.core.errors import InputError
from ray_accel.plugins.runtime import GLOO, WorkerSlot
from ray_accel.train.ranks import assign_ranks
from tests.badinput import badinput

# Rank 0's node IP, MASTER_PORT, the port for NEURON_RT_ROOT_COMM_ID.
MASTER = {"master_addr": "10.0.0.1", "master_port": 29500, "comm_port": 29511}
TORCHNEURON = Stacks(torchneuron=None, xla="torch-xla is not installed (test)")
XLA_ONLY = Stacks(torchneuron="TorchNeuron is not installed (test)", xla=None)
BOTH = Stacks(torchneuron=None, xla=None)
NEITHER = Stacks(torchneuron="TorchNeuron is not installed (test)", xla="torch-xla is not installed (test)")


def trn2_job(cores_per_worker: int = 1, accelerator_type: str | None = "Trainium2") -> list[WorkerSlot]:
    """A mock trn2.48xlarge split in 2 (p0: cores 0-31, p1: 32-63), two
    workers in each, granted the first cores of their partition."""
    raylets = ["p0", "p0", "p1", "p1"]
    own = [[base + w * cores_per_worker + k for k in range(cores_per_worker)] for base in (0, 32) for w in range(2)]
    return [
        WorkerSlot(rank=p, node_id=raylet, own_ids=tuple(map(str, ids)), **MASTER, accelerator_type=accelerator_type)
        for p, raylet, ids in zip(assign_ranks(raylets), raylets, own, strict=True)
    ]


def runtime(stacks: Stacks, efa: bool = False, fallback: str | None = None) -> NeuronRuntime:
    return NeuronRuntime(fallback=fallback, probe=lambda: stacks, efa=lambda: efa)


# -- what "auto" picks ------------------------------------------------------


@pytest.mark.parametrize(
    ("generation", "stacks", "fallback", "picked", "why"),
    [
        ("Trainium2", TORCHNEURON, None, NEURON, ""),
        ("Trainium3", BOTH, None, NEURON, ""),
        ("Trainium2", XLA_ONLY, None, XLA, "no TorchNeuron in this worker (TorchNeuron is not installed (test))"),
        ("Trainium", BOTH, None, XLA, "TorchNeuron is installed but supports Trainium2 and Trainium3 only"),
        ("Inferentia2", XLA_ONLY, None, XLA, "TorchNeuron supports Trainium2 and Trainium3 only"),
        ("Trainium2", XLA_ONLY, GLOO, GLOO, "no TorchNeuron in this worker"),
        ("Trainium", TORCHNEURON, GLOO, GLOO, "is installed but supports Trainium2 and Trainium3 only"),
        ("Trainium4", TORCHNEURON, None, NEURON, "Trainium4, not one it is documented for (Trainium2, Trainium3)"),
        (None, TORCHNEURON, GLOO, NEURON, "a Neuron device of unknown type, not one it is documented for"),
    ],
)  # fmt: skip
def test_auto_picks_torchneuron_on_the_generations_it_supports_and_says_why_otherwise(
    generation: str | None, stacks: Stacks, fallback: str | None, picked: str, why: str
) -> None:
    choice = choose(generation, stacks, fallback)
    assert choice.collective == picked
    assert why in choice.reason if why else choice.reason == ""
    assert (choice.reason == "") == (picked == NEURON and generation in GENERATIONS)


@badinput("unnamed")
def test_auto_without_any_training_stack_is_refused_naming_both() -> None:
    with pytest.raises(InputError, match=r"no Neuron training stack.*TorchNeuron is not installed.*torch-xla is not"):
        choose("Trainium2", NEITHER, None)


@given(
    st.sampled_from([*GENERATIONS, *UNSUPPORTED, "Trainium4", None]),
    st.booleans(),
    st.booleans(),
    st.sampled_from([None, GLOO]),
)
def test_auto_never_picks_a_stack_the_worker_lacks(
    generation: str | None, has_torchneuron: bool, has_xla: bool, fallback: str | None
) -> None:
    stacks = Stacks(None if has_torchneuron else "absent", None if has_xla else "absent")
    try:
        choice = choose(generation, stacks, fallback)
    except InputError:
        assert fallback is None and not has_xla
        return
    if choice.collective == NEURON:
        assert has_torchneuron and generation not in UNSUPPORTED
    elif choice.collective == XLA:
        assert has_xla and fallback is None
    else:
        assert choice.collective == fallback
    assert choice.collective != NEURON or generation in GENERATIONS or choice.reason


def test_the_mock_picks_neuron_on_trn2_and_trn3_presets_with_torchneuron_and_gloo_on_trn1() -> None:
    """The mock's runtime is the Neuron runtime on the CPU, falling back to
    gloo: with TorchNeuron in the worker a trn2 or trn3 preset trains on
    `neuron` (tests/integration/test_torchneuron.py runs it with the fake),
    a trn1 or inf2 preset never does; this test process has no TorchNeuron,
    so here every preset keeps gloo, saying why."""
    for preset, with_torchneuron in (
        ("trn2.48xlarge", NEURON),
        ("trn3.48xlarge", NEURON),
        ("trn1.32xlarge", GLOO),
        ("inf2.48xlarge", GLOO),
    ):
        spec = load_spec(preset)
        mock = MockPlugin(spec).runtime
        assert isinstance(mock, NeuronRuntime)
        here = mock.collective_backend(spec.accelerator_type)
        assert here.collective == GLOO and "TorchNeuron" in here.reason, (preset, here)
        assert choose(spec.accelerator_type, TORCHNEURON, GLOO).collective == with_torchneuron, preset


# -- what torch left behind: TorchNeuron found by feature -------------------


@pytest.mark.parametrize(
    ("registered", "privateuse1", "entry_points", "autoload", "says"),
    [
        (True, "neuron", [], None, None),
        (False, "privateuseone", [], None, "TorchNeuron is not installed: no torch.backends entry point"),
        (False, "privateuseone", ["torch_neuronx"], "0", "TORCH_DEVICE_BACKEND_AUTOLOAD=0 kept `import torch`"),
        (False, "privateuseone", ["torch_neuronx"], None, "loaded the torch.backends entry points (torch_neuronx)"),
        (True, "npu", ["torch_npu"], None, "the PrivateUse1 device is named 'npu', not 'neuron'"),
        (False, "neuron", ["torch_neuronx"], None, "no 'neuron' process-group backend is registered"),
    ],
)  # fmt: skip
def test_torchneuron_is_found_by_its_device_and_process_group(
    registered: bool, privateuse1: str, entry_points: list[str], autoload: str | None, says: str | None
) -> None:
    problem = stack_problem(registered, privateuse1, entry_points, autoload, "2.13.0+cpu")
    assert problem is None if says is None else says in str(problem)


@given(
    st.booleans(),
    st.sampled_from(["neuron", "privateuseone", "npu", ""]),
    st.lists(st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12), max_size=3),
    st.one_of(st.none(), st.sampled_from(["0", "1", "false", ""])),
)
def test_torchneuron_is_usable_exactly_when_both_features_are_there(
    registered: bool, privateuse1: str, entry_points: list[str], autoload: str | None
) -> None:
    problem = stack_problem(registered, privateuse1, entry_points, autoload, "2.13.0")
    assert (problem is None) == (registered and privateuse1 == NEURON)
    if problem is not None and not registered and privateuse1 != NEURON:
        assert all(name in problem for name in entry_points), "names what torch could load"
        assert (autoload not in (None, "1") and bool(entry_points)) == ("TORCH_DEVICE_BACKEND_AUTOLOAD" in problem)


# -- what `neuron` and `xla` need before they are made ----------------------


@badinput("unnamed")
def test_backend_neuron_without_torchneuron_is_refused_naming_what_is_missing() -> None:
    slots = trn2_job()
    with pytest.raises(
        InputError, match=r"backend 'neuron' cannot be made in this training worker: TorchNeuron is not installed"
    ):
        runtime(XLA_ONLY).worker_env(slots[0], slots, NEURON)


@badinput("unnamed")
def test_backend_xla_without_torch_xla_is_refused_naming_what_is_missing() -> None:
    slots = trn2_job()
    with pytest.raises(InputError, match=r"backend 'xla' cannot be made in this training worker: torch-xla is not"):
        runtime(TORCHNEURON).worker_env(slots[0], slots, XLA)
    # The probe itself, in this process: without torch-xla it names the release that last shipped it.
    found = xla.problem_here()
    if importlib.util.find_spec("torch_xla") is None:
        assert found is not None and found.startswith("torch-xla is not installed (PyTorch/XLA: torch-neuronx")
    else:
        assert found is None


@badinput("unnamed")
@pytest.mark.parametrize("cores", [2, 4])
def test_a_neuron_worker_holding_more_than_one_core_is_refused_naming_the_rule(cores: int) -> None:
    slots = trn2_job(cores)
    with pytest.raises(InputError) as err:
        runtime(TORCHNEURON).worker_env(slots[3], slots, NEURON)
    msg = str(err.value)
    assert "exactly one logical NeuronCore per process in distributed mode" in msg
    assert "Attempted to have more than one device per process in distributed setup" in msg
    assert f"worker rank 0 holds {cores}" in msg and "'neuron_cores': 1" in msg


def test_backend_neuron_on_trainium1_is_honoured_as_asked_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    slots = trn2_job(accelerator_type="Trainium")
    env = runtime(TORCHNEURON).worker_env(slots[0], slots, NEURON)
    assert env["NEURON_RT_VISIBLE_CORES"] == "0"
    assert "backend 'neuron' as asked on Trainium: TorchNeuron supports Trainium2, Trainium3 only" in caplog.text


# -- a `neuron` worker's environment ----------------------------------------


def test_each_neuron_worker_sees_its_one_core_with_ranks_per_partition() -> None:
    slots = trn2_job()
    envs = [runtime(TORCHNEURON).worker_env(w, slots, NEURON) for w in slots]
    assert [e["NEURON_RT_VISIBLE_CORES"] for e in envs] == ["0", "1", "32", "33"], "its own core, set before torch"
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "0", "1"], "per partition: TorchNeuron's device index"
    assert {e["LOCAL_WORLD_SIZE"] for e in envs} == {"2"}, "set with LOCAL_RANK: no grouping by IP"
    assert [e["RANK"] for e in envs] == ["0", "1", "2", "3"] and {e["WORLD_SIZE"] for e in envs} == {"4"}
    assert {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs} == {("10.0.0.1", "29500")}, "env://"
    assert {e["NEURON_RT_ROOT_COMM_ID"] for e in envs} == {"10.0.0.1:29511"}, "rank 0's host, one root"
    for e in envs:
        assert not [k for k in e if k.startswith(("PJRT_", "NEURON_PJRT_"))], "no PJRT variable for TorchNeuron"
        assert not set(EFA_ENV) & set(e), "no EFA variable on a host without EFA"


def test_efa_variables_are_set_only_where_the_host_has_an_efa_device() -> None:
    slots = trn2_job()
    with_efa = runtime(TORCHNEURON, efa=True).worker_env(slots[2], slots, NEURON)
    assert {k: with_efa[k] for k in EFA_ENV} == dict(EFA_ENV)
