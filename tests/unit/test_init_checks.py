"""`ray_accel.init` checks a request before any Ray process
starts (the end-to-end check, with the driver's children listed, is
tests/integration/test_host_parity.py)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import ray

import ray_accel
from ray_accel.bridge.managers import BridgeSpec, BridgeUnsupported
from ray_accel.cluster import auth, driver, statedir
from ray_accel.cluster.driver import check_request
from ray_accel.core.errors import InputError
from ray_accel.partition.inherited import InheritedMask
from ray_accel.partition.plan import Partition
from tests.badinput import badinput
from tests.bridge_specs import GPU, NEURON
from tests.clirun import environment


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


# `ray_accel.init` up to the `ray.init` it makes, which is stood in for:
# the partition it may name, the recorded auth a driver takes, and the
# environment and resources its raylet gets with the bridge and without.
MASK = InheritedMask("NEURON_RT_VISIBLE_CORES", "0-7", tuple(range(8)), "neuron_cores")


def parse(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1)) if text else []


def test_a_partition_is_its_core_ids_a_mask_or_ids_within_the_host_and_the_inherited_mask() -> None:
    assert driver._partition_ids(None, NEURON, parse, MASK) is None
    assert driver._partition_ids(Partition("p1", ("neuron:1",), (2, 3)), NEURON, parse, None) == [2, 3]
    assert driver._partition_ids("4-6", NEURON, parse, MASK) == [4, 5, 6]
    assert driver._partition_ids((7, 1), NEURON, parse, MASK) == [7, 1]
    for partition, mask, needle in [
        ([3, 40, 50], None, "partition names neuron_cores id 40, which this host does not have"),
        ("", None, "partition is empty"),
        ([], None, "partition is empty"),
        ("6-9", MASK, "partition names neuron_cores id 8, outside the inherited mask NEURON_RT_VISIBLE_CORES=0-7"),
    ]:
        with pytest.raises(InputError, match=re.escape(needle)):
            driver._partition_ids(partition, NEURON, parse, mask)


@pytest.fixture
def applied(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """A recorded cluster at 10.0.0.1:6379; the auths a driver applied."""
    recorded = SimpleNamespace(gcs_address="10.0.0.1:6379", auth=SimpleNamespace(token_path="/state/auth_token"))
    monkeypatch.setattr(statedir, "locate", lambda: statedir.Found(statedir.place_for("10.0.0.1")))
    monkeypatch.setattr(statedir, "load", lambda place: recorded)
    made: list[Any] = []
    monkeypatch.setattr(auth, "apply", made.append)
    monkeypatch.delenv(auth.TOKEN_ENV, raising=False)
    monkeypatch.delenv(auth.TOKEN_PATH_ENV, raising=False)
    return made


def test_a_driver_joining_the_recorded_cluster_takes_its_auth(applied: list[Any]) -> None:
    for address in (None, "local", "10.0.0.9:6379", "ray://10.0.0.9:10001"):
        driver._apply_recorded_auth(address)
    assert applied == [], "not the recorded cluster"
    for address in ("auto", "10.0.0.1:6379", "ray://10.0.0.1:6379"):
        driver._apply_recorded_auth(address)
    assert [a.token_path for a in applied] == ["/state/auth_token"] * 3


def test_the_users_own_token_wins_over_the_recorded_one(applied: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(auth.TOKEN_ENV, "mine")
    driver._apply_recorded_auth("auto")
    monkeypatch.delenv(auth.TOKEN_ENV)
    monkeypatch.setenv(auth.TOKEN_PATH_ENV, "/etc/ray/my_token")
    driver._apply_recorded_auth("auto")
    assert applied == []
    monkeypatch.setattr(statedir, "load", lambda place: None)
    monkeypatch.delenv(auth.TOKEN_PATH_ENV)
    driver._apply_recorded_auth("auto")
    assert applied == [], "no record, nothing to take"


def test_a_partition_of_a_cluster_that_exists_is_refused() -> None:
    with pytest.raises(InputError, match=r"partition='0-1' restricts a local cluster; with address='auto'"):
        ray_accel.init(partition="0-1", address="auto")


@pytest.fixture
def mock_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A mock Trainium host; `ray.init`, the bridge's install and the mask
    refresh recorded instead of done. The environment is put back after."""
    seen: dict[str, Any] = {"installed": [], "refreshed": 0}

    def fake_init(**kwargs: Any) -> str:
        seen["init"], seen["env"] = kwargs, dict(os.environ)
        return "context"

    def refresh() -> None:
        seen["refreshed"] += 1

    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.setattr(driver, "install", seen["installed"].append)
    monkeypatch.setattr(driver, "refresh_original_visible_ids", refresh)
    monkeypatch.setattr(driver, "_starts_a_local_cluster", lambda address, temp_dir: False)
    with environment({**os.environ, "RAYACCEL_MOCK": "trn1.32xlarge"}):
        yield seen


def test_a_partition_is_the_local_raylets_mask_and_its_devices_type(mock_host: dict[str, Any]) -> None:
    assert ray_accel.init(partition="0-3", address="local", num_cpus=1) == "context"
    (specs,) = mock_host["installed"]
    assert mock_host["init"] == {"address": "local", "num_cpus": 1}
    assert mock_host["env"][specs[0].visible_ids_env] == "0,1,2,3" and mock_host["refreshed"] == 1
    assert specs[0].accelerator_type and specs[0].unit_ids == tuple(range(32))


def test_a_whole_host_request_beyond_it_is_refused_before_ray_starts(mock_host: dict[str, Any]) -> None:
    with pytest.raises(InputError, match=r"resources\['neuron_cores'\]=33, but this host holds 32"):
        ray_accel.init(address="local", resources={"neuron_cores": 33})
    os.environ["NEURON_RT_VISIBLE_CORES"] = "8-11"  # a container's mask
    with pytest.raises(InputError, match=r"=5, but the inherited mask NEURON_RT_VISIBLE_CORES=8-11 holds 4"):
        ray_accel.init(address="local", resources={"neuron_cores": 5})
    assert "init" not in mock_host


def test_without_the_bridge_ray_init_gets_the_mask_and_the_count(
    mock_host: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def unsupported(specs: Any) -> None:
        raise BridgeUnsupported("ray 2.99.0 is outside the supported range")

    monkeypatch.setattr(driver, "install", unsupported)
    ray_accel.init(partition=[4, 5], address="local")
    assert mock_host["init"]["resources"] == {"neuron_cores": 2}
    assert mock_host["env"]["NEURON_RT_VISIBLE_CORES"] == "4,5", "Ray's own managers read comma lists"
    assert mock_host["refreshed"] == 0


def test_without_a_backend_ray_init_is_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    got: list[dict[str, Any]] = []
    monkeypatch.setattr(ray, "init", lambda **kw: got.append(kw) or "plain")
    monkeypatch.setattr(driver, "_starts_a_local_cluster", lambda address, temp_dir: False)
    monkeypatch.setattr(driver, "install", lambda specs: pytest.fail("no backend, no bridge"))
    with environment({k: v for k, v in os.environ.items() if not k.startswith("RAYACCEL_")}):
        if driver.discover().primary is not None:
            pytest.skip("a real accelerator backend is active on this machine")
        result = ray_accel.init(address="auto", num_cpus=2)
    assert result == "plain" and got == [{"address": "auto", "num_cpus": 2}]
