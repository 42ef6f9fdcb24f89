"""Backends that are no backends: an entry point naming something that is
not a plugin, a constructor that fails, a module that does not import; each
named, by discovery, by `load_plugin` and by the declarations."""

from __future__ import annotations

from pathlib import Path

import pytest

from ray_accel.plugins import discovery
from ray_accel.plugins.discovery import BackendUnavailable, discover_plugins, load_plugin
from tests.plugins import install_test_plugins

EXTRA = "notaplugin = os:sep\nneedsargs = math:sqrt\n"


@pytest.fixture(autouse=True)
def plugin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = install_test_plugins(tmp_path / "site", extra=EXTRA)
    monkeypatch.syspath_prepend(str(site))
    return site


def test_an_entry_point_that_is_no_plugin_or_cannot_be_made_is_inactive_saying_why() -> None:
    statuses = {s.name: s for s in discover_plugins()}
    assert statuses["notaplugin"].reason == "entry point gave str, not a DevicePlugin"
    assert statuses["needsargs"].reason is not None
    assert statuses["needsargs"].reason.startswith("failed to construct: TypeError:")
    assert isinstance(statuses["needsargs"].error, TypeError)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nope", "backend 'nope' is not installed here (installed: "),
        ("unimportable", "backend 'unimportable' failed to load ray_accel_testplugin_missing:Nothing: ModuleNotFound"),
        ("notaplugin", "backend 'notaplugin': entry point gave str, not a DevicePlugin"),
    ],
)
def test_a_backend_that_cannot_be_had_is_named_with_why(name: str, message: str) -> None:
    with pytest.raises(BackendUnavailable) as e:
        load_plugin(name)
    assert str(e.value).startswith(message)


def test_a_plugin_is_constructed_but_not_probed() -> None:
    plugin = load_plugin("exploding")  # its probe raises
    assert plugin.name == "exploding"


def test_declarations_name_each_entry_point_that_declares_nothing(
    plugin_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    found = discovery._declarations(("coverage-test", str(plugin_path)))  # a path of its own: not the cached one
    assert found.unknown["notaplugin"] == "entry point os:sep is str, not a DevicePlugin class"
    assert found.unknown["unimportable"].startswith("failed to load ray_accel_testplugin_missing:Nothing")
    assert "faketpu" in found.collectives and "notaplugin" not in found.collectives
    assert "backend notaplugin declares nothing readable" in caplog.text
