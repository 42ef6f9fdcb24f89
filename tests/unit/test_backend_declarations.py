"""What installed backends declare on their classes, read without probing:
the variables no hook may set and the collectives a job may ask for. A
third-party backend (the test plugin, registered through a real entry point)
gets exactly what the built-in ones get."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_accel.core.reader import dump
from ray_accel.hooks.config import Workload, WorkloadDenied
from ray_accel.hooks.run import HookRun, protected_env
from ray_accel.plugins.discovery import BackendUnavailable, declarations, load_plugin
from ray_accel.plugins.traits import DeviceTraits, SplitOrder
from tests.badinput import badinput
from tests.integration.train_hooks import SetsEnv
from tests.plugins import install_test_plugins


@pytest.fixture
def test_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = install_test_plugins(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("RAYACCEL_HOOK_DIR", str(tmp_path / "ledger"))
    return site


def test_every_installed_backends_protected_variables_are_protected(test_plugins: Path) -> None:
    protected = protected_env()
    # The test plugin's own declaration, Ray's switch for its mask included.
    assert {"FAKE_TPU_VISIBLE_CHIPS", "RAY_EXPERIMENTAL_NOSET_FAKE_TPU_VISIBLE_CHIPS", "FAKE_TPU_COMM_ID"} <= protected
    # The built-in backends' (each declared in backends/), and ray-accel's own.
    builtin = {
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "NEURON_RT_VISIBLE_CORES",
        "PJRT_DEVICE",
        "TORCHELASTIC_RUN_ID",
    }
    own = {"RAYACCEL_RESOURCE_FILE", "RAY_ADDRESS", "LD_PRELOAD", "RANK", "MASTER_PORT"}
    assert builtin | own <= protected, sorted((builtin | own) - protected)
    assert "FAKE_TPU_TUNING" not in protected and "NCCL_DEBUG" not in protected, "tuning stays open to hooks"


@badinput("unnamed")
@pytest.mark.parametrize("variable", ["FAKE_TPU_COMM_ID", "FAKE_TPU_VISIBLE_CHIPS"])
def test_a_hook_setting_a_third_party_backends_variable_is_refused_naming_both(
    test_plugins: Path, variable: str
) -> None:
    run = HookRun("r", Workload("w", "p0"), [SetsEnv(variable, "x")])
    with pytest.raises(WorkloadDenied, match=f"hook SetsEnv may not set {variable}"):
        run.pre_create(protected=protected_env())
    again = HookRun("r", Workload("w2", "p0"), [SetsEnv(variable, "x")])
    with pytest.raises(WorkloadDenied, match=f"hook SetsEnv may not set {variable}"):
        again.pre_create()  # the default: what tasks and actors with hooks get


def test_a_hook_may_set_what_no_backend_protects(test_plugins: Path) -> None:
    run = HookRun("r", Workload("w", "p0"), [SetsEnv("FAKE_TPU_TUNING", "fast")])
    assert dict(run.pre_create().env_vars) == {"FAKE_TPU_TUNING": "fast"}
    run.post_terminate()


def test_a_backend_whose_class_cannot_be_loaded_is_named_with_why(test_plugins: Path) -> None:
    found = declarations()
    assert found.collectives["faketpu"] == ("fakeccl",) and found.collectives["cuda"] == ("nccl",)
    assert found.collectives["neuron"] == ("neuron", "xla")
    assert "ModuleNotFoundError" in found.unknown["unimportable"]
    assert set(found.unknown) == {"unimportable"}, "a backend that only fails to probe declares as any other"


def test_a_config_accepts_any_installed_backends_collective(
    test_plugins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray_accel.train import AcceleratorTorchConfig
    from ray_accel.train.jobs import CALLBACKS_ENV

    monkeypatch.setenv(CALLBACKS_ENV, "")  # restored after: construction names our callback there
    assert AcceleratorTorchConfig(backend="fakeccl").backend == "fakeccl"
    with pytest.raises(ValueError, match=r"backend 'mpi': use one of auto, gloo, .*fakeccl"):
        AcceleratorTorchConfig(backend="mpi")


def test_a_backend_is_loaded_by_name_without_probing(test_plugins: Path) -> None:
    assert load_plugin("faketpu").name == "faketpu"
    exploding = load_plugin("exploding")  # its probe raises; loading does not probe
    assert exploding.name == "exploding"
    with pytest.raises(BackendUnavailable, match=r"backend 'nope' is not installed here \(installed: .*faketpu"):
        load_plugin("nope")
    with pytest.raises(BackendUnavailable, match="backend 'unimportable' failed to load .*ModuleNotFoundError"):
        load_plugin("unimportable")


@given(
    st.builds(
        DeviceTraits,
        shareable=st.booleans(),
        split=st.sampled_from(SplitOrder),
        opaque_ids=st.booleans(),
        reads_published_masks=st.booleans(),
    )
)
def test_traits_round_trip_through_json(traits: DeviceTraits) -> None:
    assert DeviceTraits.from_json(dump(traits)) == traits


_values = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12), st.lists(st.booleans(), max_size=2))


@given(st.dictionaries(st.sampled_from(["shareable", "split", "opaque_ids", "reads_published_masks", "x"]), _values))
def test_traits_from_anything_else_are_refused_naming_the_field(row: dict[str, object]) -> None:
    try:
        traits = DeviceTraits.from_json(row)
    except ValueError as e:
        assert str(e).startswith("traits"), e
    else:
        assert dump(traits) == row, "only a complete, well-typed row is read"
