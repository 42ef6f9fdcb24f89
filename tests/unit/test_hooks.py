from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_accel.hooks.config import HookConfigError, LifecycleHook, Workload, WorkloadConfig
from tests.badinput import badinput


@badinput("unnamed")
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"env_vars": {"1BAD": "x"}}, "bad environment variable name '1BAD'"),
        ({"env_vars": {"A": "x\nB=y"}}, "one line"),
        ({"env_vars": {"NEURON_RT_VISIBLE_CORES": "0-31"}}, "protected variable NEURON_RT_VISIBLE_CORES"),
        ({"env_vars": {"CUDA_VISIBLE_DEVICES": "0"}}, "protected"),
        ({"mounts": (("rel", "/x"),)}, "absolute"),
        ({"extra_gids": (-1,)}, "bad gid"),
        ({"resource_data": {"K": "a\nb"}}, "resource_data"),
    ],
)
def test_bad_configs_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(HookConfigError, match=message):
        WorkloadConfig(**kwargs)  # type: ignore[arg-type]


@given(st.dictionaries(st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,10}\Z"), st.text(max_size=20), max_size=5))
def test_env_vars_accepted_iff_safe(env: dict[str, str]) -> None:
    from ray_accel.hooks.config import PROTECTED_ENV_VARS

    unsafe = any(k in PROTECTED_ENV_VARS or "\n" in v or "\0" in v for k, v in env.items())
    try:
        WorkloadConfig(env_vars=env)
    except HookConfigError:
        assert unsafe
    else:
        assert not unsafe


def test_default_hook_admits() -> None:
    hook = LifecycleHook(Workload("w", "p0", (0, 1)))
    assert hook.pre_create() == WorkloadConfig()
    assert hook.post_terminate() is None
