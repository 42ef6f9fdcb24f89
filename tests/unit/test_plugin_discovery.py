from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ray_accel.plugins.discovery import discover_plugins
from tests.clirun import cli_json_here as cli_json
from tests.plugins import install_test_plugins


@pytest.fixture
def plugin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = install_test_plugins(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    return site


def _pythonpath(site: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(site), *sys.path])}


def test_entry_point_plugin_is_discovered_and_listed(plugin_path: Path) -> None:
    out = cli_json("devices", env=_pythonpath(plugin_path))
    plugins = {p["name"]: p for p in out["plugins"]}
    assert plugins["faketpu"] == {"name": "faketpu", "active": True, "reason": None}
    assert [d["id"] for d in out["devices"] if d["plugin"] == "faketpu"] == ["chip0", "chip1", "chip2", "chip3"]
    assert out["host"]["resource_name"] == "FAKETPU"


def test_failing_plugins_are_inactive_with_reason_and_others_still_load(plugin_path: Path) -> None:
    out = cli_json("devices", env=_pythonpath(plugin_path))
    plugins = {p["name"]: p for p in out["plugins"]}
    assert plugins["exploding"]["active"] is False
    assert "RuntimeError: driver went away" in plugins["exploding"]["reason"]
    assert plugins["absent"]["reason"] == "no /dev/fake found"
    assert plugins["unimportable"]["active"] is False
    assert "ModuleNotFoundError" in plugins["unimportable"]["reason"]
    assert plugins["faketpu"]["active"] is True


def test_mock_env_makes_mock_the_only_active_backend(plugin_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYACCEL_MOCK", "trn1.2xlarge")
    statuses = {s.name: s for s in discover_plugins()}
    assert not statuses["faketpu"].active, "real backends are not even probed under the mock"
    out = cli_json("devices", env={**_pythonpath(plugin_path), "RAYACCEL_MOCK": "trn1.2xlarge"})
    active = [p["name"] for p in out["plugins"] if p["active"]]
    assert active == ["mock"]
    reasons = {p["name"]: p["reason"] for p in out["plugins"]}
    assert "only the mock backend" in reasons["faketpu"]


def test_discovery_in_process(plugin_path: Path) -> None:
    statuses = {s.name: s for s in discover_plugins()}
    assert statuses["faketpu"].active
    assert not statuses["exploding"].active
    assert isinstance(statuses["exploding"].error, RuntimeError)
    only = discover_plugins(only="faketpu")
    assert [s.name for s in only] == ["faketpu"]
