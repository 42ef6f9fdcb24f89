from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ray_accel.plugins import discovery
from ray_accel.plugins.discovery import BackendUnavailable, discover_plugins, load_plugin
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


EXTRA = "notaplugin = os:sep\nneedsargs = math:sqrt\n"


class TestEntryPointsThatAreNoBackends:
    """Backends that are no backends: an entry point naming something that is
    not a plugin, a constructor that fails, a module that does not import; each
    named, by discovery, by `load_plugin` and by the declarations."""

    @pytest.fixture(autouse=True)
    def plugin_path(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
        site = install_test_plugins(tmp_path / "site", extra=EXTRA)
        monkeypatch.syspath_prepend(str(site))
        return site

    def test_an_entry_point_that_is_no_plugin_or_cannot_be_made_is_inactive_saying_why(self) -> None:
        statuses = {s.name: s for s in discover_plugins()}
        assert statuses["notaplugin"].reason == "entry point gave str, not a DevicePlugin"
        assert statuses["needsargs"].reason is not None
        assert statuses["needsargs"].reason.startswith("failed to construct: TypeError:")
        assert isinstance(statuses["needsargs"].error, TypeError)

    @pytest.mark.parametrize(
        ("name", "message"),
        [
            ("nope", "backend 'nope' is not installed here (installed: "),
            (
                "unimportable",
                "backend 'unimportable' failed to load ray_accel_testplugin_missing:Nothing: ModuleNotFound",
            ),
            ("notaplugin", "backend 'notaplugin': entry point gave str, not a DevicePlugin"),
        ],
    )
    def test_a_backend_that_cannot_be_had_is_named_with_why(self, name: str, message: str) -> None:
        with pytest.raises(BackendUnavailable) as e:
            load_plugin(name)
        assert str(e.value).startswith(message)

    def test_a_plugin_is_constructed_but_not_probed(self) -> None:
        plugin = load_plugin("exploding")  # its probe raises
        assert plugin.name == "exploding"

    def test_declarations_name_each_entry_point_that_declares_nothing(
        self, plugin_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        found = discovery._declarations(("coverage-test", str(plugin_path)))  # a path of its own: not the cached one
        assert found.unknown["notaplugin"] == "entry point os:sep is str, not a DevicePlugin class"
        assert found.unknown["unimportable"].startswith("failed to load ray_accel_testplugin_missing:Nothing")
        assert "faketpu" in found.collectives and "notaplugin" not in found.collectives
        assert "backend notaplugin declares nothing readable" in caplog.text
