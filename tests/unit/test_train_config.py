"""`AcceleratorTorchConfig` refuses what it cannot honour, before any worker starts."""

from __future__ import annotations

import pytest

from ray_accel.core.errors import InputError
from ray_accel.train import AcceleratorTorchConfig
from ray_accel.train.jobs import CALLBACKS_ENV
from tests.badinput import badinput


@badinput("unnamed")
@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"backend": "mpi"}, "backend 'mpi': use one of"),
        ({"backend": None}, "backend None: use one of"),
        # TorchConfig's own field: Ray's TorchConfig also takes "tcp".
        ({"init_method": "tcp"}, "init_method 'tcp': AcceleratorTorchConfig sets up the process group with"),
    ],
)
def test_what_cannot_be_honoured_is_refused_naming_it(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        AcceleratorTorchConfig(**kwargs)  # type: ignore[arg-type]


def test_the_defaults_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CALLBACKS_ENV, "")  # restored after: construction names our callback there
    config = AcceleratorTorchConfig(timeout_s=60)
    assert (config.backend, config.init_method, config.timeout_s) == ("auto", "env", 60)


def test_the_contexts_old_backend_name_answers_with_a_warning() -> None:
    """`TrainContext.backend` was the collective's name before 0.3.0: code
    written against it keeps working, told of the new name."""
    from ray_accel.train.context import TrainContext

    ctx = TrainContext(
        world_rank=0,
        world_size=2,
        local_rank=0,
        local_world_size=2,
        node_rank=0,
        node_id="n1",
        partition="p0",
        collective="gloo",
        visible_ids=("0", "1"),
        own_ids=("0",),
        device_family="neuron",
    )
    with pytest.warns(FutureWarning, match=r"\.collective"):
        assert ctx.backend == ctx.collective == "gloo"
