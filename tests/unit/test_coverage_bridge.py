"""The bridge refuses to install, naming why, where Ray is absent or lacks
the registry it replaces; a worker's masks are refreshed through Ray's own."""

from __future__ import annotations

import importlib.metadata

import pytest

from ray_accel.bridge import autoinstall, managers
from ray_accel.bridge.managers import SPEC_ENV, BridgeUnsupported, check_ray_version, install
from ray_accel.rayapi import accelerators
from ray_accel.rayapi.feature import FAKE_RAY_VERSION_ENV, RayApiMissing, ray_version
from tests.unit.test_init_checks import NEURON


def test_without_ray_the_bridge_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAKE_RAY_VERSION_ENV, "not installed")
    with pytest.raises(BridgeUnsupported, match="^ray is not installed$"):
        install([NEURON])


def test_a_ray_whose_distribution_is_gone_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    def gone(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.delenv(FAKE_RAY_VERSION_ENV, raising=False)
    monkeypatch.setattr(importlib.metadata, "version", gone)
    assert ray_version() == "not installed"
    with pytest.raises(BridgeUnsupported, match="^ray is not installed$"):
        check_ray_version()


def test_a_ray_without_the_registry_is_named_and_nothing_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_registry() -> None:
        raise RayApiMissing("Ray 2.60.0: ray._private.accelerators has no _resource_name_to_accelerator_manager")

    monkeypatch.setattr(accelerators, "check_registry", no_registry)
    with pytest.raises(BridgeUnsupported, match="has no _resource_name_to_accelerator_manager: the bridge is not"):
        check_ray_version()


def test_a_registry_that_refuses_our_managers_leaves_the_bridge_uninstalled(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuses(ours: object) -> None:
        raise RayApiMissing("Ray 2.60.0: the registry is not a dict")

    monkeypatch.setattr(accelerators, "put_managers", refuses)
    with pytest.raises(BridgeUnsupported, match="the registry is not a dict: the bridge is not installed$"):
        install([NEURON])


def test_a_workers_masks_are_recorded_again_through_rays_accelerators(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setenv(SPEC_ENV, NEURON.to_env())
    monkeypatch.setattr(managers, "install", lambda specs: calls.append("install"))
    monkeypatch.setattr(accelerators, "refresh_original_visible_ids", lambda: calls.append("refresh"))
    autoinstall._autoinstall()
    assert calls == ["install", "refresh"]
