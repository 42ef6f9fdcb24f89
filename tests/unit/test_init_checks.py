"""`ray_accel.init` checks a request before any Ray process
starts (the end-to-end check, with the driver's children listed, is
tests/integration/test_host_parity.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ray_accel_cuda.runtime import TRAITS as CUDA_TRAITS
from ray_accel_neuron.runtime import TRAITS as NEURON_TRAITS

from ray_accel.bridge.managers import BridgeSpec
from ray_accel.cluster.driver import check_request
from ray_accel.core.errors import InputError
from tests.badinput import badinput

NEURON = BridgeSpec(
    resource_name="neuron_cores",
    visible_ids_env="NEURON_RT_VISIBLE_CORES",
    family="neuron",
    accelerator_type="Trainium",
    unit_ids=tuple(range(32)),
    backend="neuron",
    traits=NEURON_TRAITS,
)
GPU = BridgeSpec(
    resource_name="GPU",
    visible_ids_env="CUDA_VISIBLE_DEVICES",
    family="gpu",
    accelerator_type="A100",
    unit_ids=tuple(range(8)),
    backend="cuda",
    traits=CUDA_TRAITS,
)


@badinput("leftover")
@pytest.mark.parametrize(
    ("spec", "kwargs", "needle"),
    [
        (
            NEURON,
            {"resources": {"neuron_cores": 8}},
            "resources['neuron_cores']=8, but the mask holds 4 (NEURON_RT_VISIBLE_CORES=0-3); nothing was started",
        ),
        (NEURON, {"resources": {"neuron_cores": 1.5}}, "neuron_cores come in whole units"),
        (NEURON, {"resources": {"neuron_cores": "2"}}, "is not a number"),
        (NEURON, {"resources": {"neuron_cores": -1}}, "is negative"),
        (GPU, {"num_gpus": 5}, "num_gpus=5, but the mask holds 4"),
    ],
)
def test_refused_requests_name_the_value(spec: BridgeSpec, kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(InputError, match=re.escape(needle)) as e:
        check_request(spec, dict(kwargs), [0, 1, 2, 3], "the mask")
    assert isinstance(e.value, ValueError), "the same exception type Ray raises for this"


@pytest.mark.parametrize(
    ("spec", "kwargs"),
    [
        (NEURON, {}),
        (NEURON, {"resources": {"neuron_cores": 4}}),
        (NEURON, {"resources": {"other": 99}}),
        (GPU, {"num_gpus": 0.5}),  # GPUs may be shared
        (GPU, {"num_gpus": 4}),
    ],
)
def test_requests_within_the_visible_units_pass(spec: BridgeSpec, kwargs: dict[str, object]) -> None:
    assert check_request(spec, dict(kwargs), [0, 1, 2, 3], "the mask") is None


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"partition": "0-1", "backend": "mock"}, "partition='0-1' needs an active backend, and backend 'mock' is not"),
        ({"backend": "mock"}, "backend='mock' needs an active backend, and backend 'mock' is not active"),
    ],
)
def test_what_plain_ray_init_would_drop_is_refused_before_anything_starts(
    kwargs: dict[str, object], needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mock backend is inactive without RAYACCEL_MOCK (cleared by
    tests/conftest.py): falling back to plain ray.init would drop the request."""
    import ray

    import ray_accel

    monkeypatch.setenv("HOME", str(tmp_path))  # where a token file would be made
    with pytest.raises(InputError, match=re.escape(needle)):
        ray_accel.init(**kwargs)  # type: ignore[arg-type]
    assert not ray.is_initialized()
    assert list(tmp_path.iterdir()) == [], "no token file, nothing else"
