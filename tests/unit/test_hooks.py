from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_accel.hooks.config import NOT_APPLICABLE, HookConfigError, LifecycleHook, Workload, WorkloadConfig
from tests.badinput import badinput


@badinput("unnamed")
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"env_vars": {"1BAD": "x"}}, "bad environment variable name '1BAD'"),
        ({"env_vars": {"A": "x\nB=y"}}, "one line"),
        ({"env_vars": {"RAYACCEL_RESOURCE_FILE": "/x"}}, "protected variable RAYACCEL_RESOURCE_FILE"),
        ({"env_vars": {"LOCAL_RANK": "0"}}, "protected variable LOCAL_RANK"),
        ({"mounts": (("/data", "/data"),)}, r"mounts=\(\('/data', '/data'\),\) cannot be applied to a Ray worker"),
        ({"networks": ("efa0",)}, r"networks=\('efa0',\) cannot be applied"),
        ({"extra_gids": (27,)}, r"extra_gids=\(27,\) cannot be applied"),
        ({"extra_syscalls": ("perf_event_open",)}, r"extra_syscalls=\('perf_event_open',\) cannot be applied"),
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


_values = {
    "mounts": st.lists(st.tuples(st.text(max_size=8), st.text(max_size=8)), max_size=3).map(tuple),
    "networks": st.lists(st.text(max_size=8), max_size=3).map(tuple),
    "extra_gids": st.lists(st.integers(-(2**31), 2**32), max_size=3).map(tuple),
    "extra_syscalls": st.lists(st.text(max_size=8), max_size=3).map(tuple),
}


@given(st.sampled_from(NOT_APPLICABLE).flatmap(lambda name: st.tuples(st.just(name), _values[name])))
def test_a_field_a_worker_cannot_be_given_is_refused_by_name_whatever_its_value(case: tuple[str, tuple]) -> None:
    """A Ray worker is a process the raylet started, not a container we
    create: mounts, networks, groups and syscalls are never silently dropped."""
    name, value = case
    if not value:
        assert getattr(WorkloadConfig(**{name: value}), name) == ()  # type: ignore[arg-type]
        return
    with pytest.raises(HookConfigError, match=rf"^{name}=") as e:
        WorkloadConfig(**{name: value})  # type: ignore[arg-type]
    assert repr(value) in str(e.value)


def test_default_hook_admits() -> None:
    hook = LifecycleHook(Workload("w", "p0", (0, 1)))
    assert hook.pre_create() == WorkloadConfig()
    assert hook.post_terminate() is None
