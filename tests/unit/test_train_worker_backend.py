"""Which backend a training worker trains with, found in the worker.

A worker whose raylet's bridge spec names a backend loads that backend by
name (no discovery); one that cannot is an error naming the backend and the
reason, raised at the job's start (`describe`, the first call of on_start),
never a quiet fall back to gloo. A worker without a spec (a raylet ray-accel
did not start) asks discovery, and with nothing found trains on gloo.
tests/integration/test_train.py fails a real fit() this way.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from ray_accel_mock import MockPlugin, load_spec
from ray_accel_neuron.runtime import NeuronRuntime

from ray_accel.bridge.managers import SPEC_ENV, BridgeSpec
from ray_accel.plugins import discovery
from ray_accel.plugins.interface import GlooRuntime
from ray_accel.train import worker
from tests.badinput import badinput
from tests.plugins import install_test_plugins


@pytest.fixture(autouse=True)
def fresh_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "_state", worker._WorkerState())
    monkeypatch.delenv(SPEC_ENV, raising=False)
    discovery.process_backend.cache_clear()


def spec_naming(backend: str) -> str:
    spec = BridgeSpec.from_plugin(MockPlugin(load_spec("trn1.32xlarge")))
    return dataclasses.replace(spec, backend=backend).to_env()


def no_discovery(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a worker whose spec names its backend runs no discovery")

    monkeypatch.setattr(discovery, "discover", refuse)


@badinput("unnamed")
def test_a_worker_whose_backend_is_not_installed_fails_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    no_discovery(monkeypatch)
    monkeypatch.setenv(SPEC_ENV, spec_naming("acme-tpu"))
    with pytest.raises(
        worker.WorkerBackendError,
        match=r"cannot load its raylet's backend: backend 'acme-tpu' is not installed here \(installed: .*mock",
    ):
        worker.describe_backend()
    with pytest.raises(worker.WorkerBackendError, match="acme-tpu"):
        worker.runtime()


@badinput("unnamed")
def test_a_worker_whose_backend_cannot_build_its_runtime_fails_naming_it_and_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    no_discovery(monkeypatch)
    monkeypatch.setenv(SPEC_ENV, spec_naming("mock"))
    monkeypatch.setenv("RAYACCEL_MOCK", "no-such-preset")
    with pytest.raises(
        worker.WorkerBackendError, match=r"backend 'mock': SpecError: unknown mock preset 'no-such-preset'"
    ):
        worker.describe_backend()


def test_a_worker_loads_the_backend_its_spec_names_without_discovery(monkeypatch: pytest.MonkeyPatch) -> None:
    no_discovery(monkeypatch)
    monkeypatch.setenv(SPEC_ENV, spec_naming("mock"))
    monkeypatch.setenv("RAYACCEL_MOCK", "trn1.32xlarge")
    chosen = worker.describe_backend()
    assert chosen["backend"] == "mock" and chosen["collective"] == "gloo"
    assert "TorchNeuron supports Trainium2 and Trainium3 only" in str(chosen["reason"]), "a Trainium1 spec says why"
    assert isinstance(worker.runtime(), NeuronRuntime), "the family's real runtime, on the CPU"


def test_a_backend_without_a_runtime_trains_on_gloo_with_its_own_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_discovery(monkeypatch)
    monkeypatch.syspath_prepend(str(install_test_plugins(tmp_path / "site")))
    monkeypatch.setenv(SPEC_ENV, spec_naming("faketpu"))
    assert worker.describe_backend() == {"backend": "faketpu", "collective": "gloo", "reason": ""}
    runtime = worker.runtime()
    assert isinstance(runtime, GlooRuntime)


def test_a_worker_without_a_spec_asks_discovery_and_with_nothing_found_trains_on_gloo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(discovery, "discover", lambda: discovery.PluginInventory(()))
    assert worker.describe_backend() == {"backend": None, "collective": "gloo", "reason": ""}
    assert isinstance(worker.runtime(), GlooRuntime)


@badinput("unnamed")
def test_a_worker_whose_discovery_fails_fails_naming_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYACCEL_MOCK", "no-such-preset")
    with pytest.raises(worker.WorkerBackendError, match="discovery failed in this training worker: .*no-such-preset"):
        worker.describe_backend()
