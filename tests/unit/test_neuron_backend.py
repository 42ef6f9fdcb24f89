"""Neuron backend through its seams: a fake sysfs tree and a stub neuron-ls."""

from __future__ import annotations

import stat
import sys
import time
from pathlib import Path

import pytest
from ray_accel_mock.spec import load_spec
from ray_accel_neuron import NeuronPlugin
from ray_accel_neuron.neuron_ls import NeuronLsError, normalize_bdf, parse_output
from ray_accel_neuron.runtime import efa_present

from tests.conftest import CliRunner, cli_json
from tests.fakes.neuron_sysfs import make_tree

STUB = Path(__file__).resolve().parents[1] / "fakes" / "neuron_ls_stub.py"
TYPES = {
    "trn1.2xlarge": "Trainium",
    "trn1.32xlarge": "Trainium",
    "inf2.48xlarge": "Inferentia2",
    "trn2.48xlarge": "Trainium2",
}


@pytest.fixture
def stub(tmp_path: Path) -> Path:
    """An executable neuron-ls that runs the stub with this interpreter."""
    path = tmp_path / "neuron-ls"
    path.write_text(f'#!/bin/sh\nexec {sys.executable} {STUB} "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize("preset", sorted(TYPES))
def test_sysfs_tree_gives_the_right_node(preset: str, tmp_path: Path) -> None:
    root = make_tree(tmp_path / "sys", preset)
    out = cli_json("devices", "--backend", "neuron", env={"RAYACCEL_NEURON_SYSFS_ROOT": str(root)})
    expected = load_spec(preset).devices
    got = out["devices"]
    assert [d["id"] for d in got] == [d.id for d in expected]
    assert [d["core_ids"] for d in got] == [list(d.core_ids) for d in expected]
    assert [d["peers"] for d in got] == [list(d.peers) for d in expected]
    assert {d["model"] for d in got} == {TYPES[preset]}
    assert out["node"]["accelerator_type"] == TYPES[preset]
    assert out["node"]["instance_type"] == preset
    assert out["node"]["core_count"] == len([c for d in expected for c in d.core_ids])
    assert got[0]["serial"] == "SN000000"


def test_trn2_logical_core_size_is_honoured(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "sys", "trn2.48xlarge")
    default = NeuronPlugin({"RAYACCEL_NEURON_SYSFS_ROOT": str(root)})
    assert default.probe() is None
    assert default.list_devices()[1].core_ids == (4, 5, 6, 7)
    lnc1 = NeuronPlugin({"RAYACCEL_NEURON_SYSFS_ROOT": str(root), "NEURON_LOGICAL_NC_CONFIG": "1"})
    assert lnc1.probe() is None
    assert lnc1.list_devices()[1].core_ids == tuple(range(8, 16))
    assert lnc1.node_info().core_count == 128


def test_sysfs_metrics_and_ecc_health(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "sys", "trn1.32xlarge", ecc_uncorrected={5: 2})
    plugin = NeuronPlugin({"RAYACCEL_NEURON_SYSFS_ROOT": str(root)})
    assert plugin.probe() is None
    samples = {s.device_id: s for s in plugin.telemetry.device_samples()}
    assert samples["neuron:0"].memory_used_bytes == 1000 + 1001
    assert samples["neuron:0"].healthy
    assert not samples["neuron:5"].healthy
    assert samples["neuron:5"].health_reason == "mem_ecc_uncorrected=2"
    # Re-evaluated each time: the counter going back (driver reload) heals it.
    (root / "neuron5" / "stats" / "hardware" / "mem_ecc_uncorrected" / "total").write_text("0\n")
    assert {s.device_id: s for s in plugin.telemetry.device_samples()}["neuron:5"].healthy


def test_sysfs_path_runs_no_subprocess(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    def refuse(*a: object, **k: object) -> None:
        raise AssertionError("subprocess on the sysfs path")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    plugin = NeuronPlugin({"RAYACCEL_NEURON_SYSFS_ROOT": str(make_tree(tmp_path / "sys", "inf2.48xlarge"))})
    assert plugin.probe() is None
    assert len(plugin.list_devices()) == 12


def _ls_env(stub: Path, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"RAYACCEL_NEURON_SYSFS_ROOT": str(tmp_path / "none"), "RAYACCEL_NEURON_LS": str(stub), **extra}


@pytest.mark.parametrize("preset", sorted(TYPES))
def test_neuron_ls_drives_discovery_without_sysfs(preset: str, stub: Path, tmp_path: Path) -> None:
    out = cli_json("devices", "--backend", "neuron", env=_ls_env(stub, tmp_path, STUB_PRESET=preset))
    expected = load_spec(preset).devices
    assert [d["core_ids"] for d in out["devices"]] == [list(d.core_ids) for d in expected]
    assert [d["peers"] for d in out["devices"]] == [list(d.peers) for d in expected]
    assert out["node"]["accelerator_type"] == TYPES[preset]
    assert out["devices"][0]["pci_bus_id"] == "0000:10:1e.0"
    assert out["devices"][0]["attributes"]["pids"] == "4242"


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("fail", "exited with 1: 2026-Nov-22 10:00:00.001 1234:1234 FATAL  NRT:nrt_init  Neuron driver is not loaded"),
        ("hang", "did not answer within 1s"),
        ("invalid", "invalid JSON"),
    ],
)
def test_neuron_ls_failures_give_an_inactive_plugin(mode: str, reason: str, stub: Path, tmp_path: Path) -> None:
    start = time.monotonic()
    out = cli_json("devices", env=_ls_env(stub, tmp_path, STUB_MODE=mode, RAYACCEL_NEURON_LS_TIMEOUT="1"))
    neuron = next(p for p in out["plugins"] if p["name"] == "neuron")
    assert neuron["active"] is False
    assert reason in neuron["reason"]
    assert time.monotonic() - start < 30


def test_old_neuron_ls_json_still_works(stub: Path, tmp_path: Path) -> None:
    out = cli_json("devices", "--backend", "neuron", env=_ls_env(stub, tmp_path, STUB_MODE="old"))
    assert len(out["devices"]) == 16
    assert sorted(c for d in out["devices"] for c in d["core_ids"]) == list(range(32))
    assert {d["numa_node"] for d in out["devices"]} == {-1}


def test_short_bdf_and_single_device(stub: Path, tmp_path: Path) -> None:
    out = cli_json(
        "devices", "--backend", "neuron", env=_ls_env(stub, tmp_path, STUB_MODE="short-bdf", STUB_PRESET="trn1.2xlarge")
    )
    assert out["devices"][0]["pci_bus_id"] == "0000:10:1e.0"
    assert out["devices"][0]["peers"] == []


def test_no_neuron_at_all(tmp_path: Path, cli: CliRunner) -> None:
    env = {"RAYACCEL_NEURON_SYSFS_ROOT": str(tmp_path), "PATH": "/usr/bin:/bin", "RAYACCEL_NEURON_LS": ""}
    out = cli_json("devices", env=env)
    neuron = next(p for p in out["plugins"] if p["name"] == "neuron")
    assert neuron["active"] is False and "no Neuron devices" in neuron["reason"]


def test_parse_output_edge_cases() -> None:
    (d,) = parse_output(
        '[{"neuron_device": 0, "bdf": "1e:00.0", "numa_node": "-1", "connected_to": null, "nc_count": 2}]'
    )
    assert (d.numa_node, d.connected, d.bdf, d.core_ids) == (-1, (), "0000:1e:00.0", None)
    with pytest.raises(NeuronLsError, match="nc_count"):
        parse_output('[{"neuron_device": 0}]')
    with pytest.raises(NeuronLsError, match="not a list"):
        parse_output('{"x": 1}')
    assert normalize_bdf("0000:10:1C.0") == "0000:10:1c.0"
    assert normalize_bdf(None) is None


def test_visible_ranges_through_plugin(tmp_path: Path) -> None:
    plugin = NeuronPlugin({"RAYACCEL_NEURON_SYSFS_ROOT": str(make_tree(tmp_path / "s", "trn1.32xlarge"))})
    assert plugin.probe() is None
    assert plugin.parse_visible("0-3") == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="names 32, not on this node"):
        plugin.parse_visible("30-33")


def test_efa_detection(tmp_path: Path) -> None:
    assert not efa_present(str(tmp_path / "missing"))
    (tmp_path / "ib").mkdir()
    assert not efa_present(str(tmp_path / "ib"))
    (tmp_path / "ib" / "rdmap16s27").mkdir()
    assert efa_present(str(tmp_path / "ib"))
