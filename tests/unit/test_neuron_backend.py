"""Neuron backend through its seams: a fake sysfs tree and a stub neuron-ls."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from ray_accel_mock.spec import load_spec
from ray_accel_neuron import NeuronPlugin
from ray_accel_neuron.neuron_ls import NeuronLsError, normalize_bdf, parse_output
from ray_accel_neuron.runtime import efa_present

from tests.cli_process import CliRunner
from tests.clirun import cli_json_here as cli_json
from tests.fakes.neuron_env import LS_STUB, executable, ls_only, no_tools, tree_only
from tests.fakes.neuron_sysfs import build_tree

STUB = Path(__file__).resolve().parents[1] / "fakes" / "neuron_ls_stub.py"
TYPES = {
    "trn1.2xlarge": "Trainium",
    "trn1.32xlarge": "Trainium",
    "inf2.48xlarge": "Inferentia2",
    "trn2.48xlarge": "Trainium2",
    "trn3.48xlarge": "Trainium3",
    "trn3e.24xlarge": "Trainium3",
    "trn3pd98.3xlarge": "Trainium3",
}


@pytest.fixture
def stub(tmp_path: Path) -> Path:
    """An executable neuron-ls that runs the stub with this interpreter."""
    return executable(tmp_path / "neuron-ls", LS_STUB)


# These tests used to run on the legacy `make_tree`, which wrote the preset
# name into info/architecture/instance_type, counter directories for ECC and
# 8-character serials. The driver writes the family ("Trn1") there, plain ECC
# files and 16 hex digits (tests/fakes/neuron_sysfs.py), and the family is
# not an instance type: they now run on the driver-faithful `build_tree`, and
# expect the instance type only where the shape is unique.
INSTANCE_BY_SHAPE = {
    "trn1.2xlarge": "trn1.2xlarge",
    "trn1.32xlarge": "unknown",  # trn1.32xlarge or trn1n.32xlarge
    "inf2.48xlarge": "inf2.48xlarge",
    "trn2.48xlarge": "unknown",  # trn2, trn2n or trn2u
    # The driver knows several names for every Trainium3 shape (arch.AMBIGUOUS_SHAPES).
    "trn3.48xlarge": "unknown",
    "trn3e.24xlarge": "unknown",
    "trn3pd98.3xlarge": "unknown",
}


@pytest.mark.parametrize("preset", sorted(TYPES))
def test_sysfs_tree_gives_the_right_host(preset: str, tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", preset, core_metrics=False)
    out = cli_json("devices", "--backend", "neuron", env=tree_only(tree))
    expected = load_spec(preset).devices
    got = out["devices"]
    assert [d["id"] for d in got] == [d.id for d in expected]
    assert [d["core_ids"] for d in got] == [list(d.core_ids) for d in expected]
    # The driver lists trn2 links in another order than the docs: same sets.
    assert [sorted(d["peers"]) for d in got] == [sorted(d.peers) for d in expected]
    assert {d["model"] for d in got} == {TYPES[preset]}
    assert out["host"]["accelerator_type"] == TYPES[preset]
    assert out["host"]["instance_type"] == INSTANCE_BY_SHAPE[preset]
    assert out["host"]["core_count"] == len([c for d in expected for c in d.core_ids])
    assert got[0]["serial"] == f"{0x9FF5434815C8BD00:016x}"


def test_trn2_logical_core_size_is_honoured(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn2.48xlarge", core_metrics=False)
    default = NeuronPlugin(tree_only(tree))
    assert default.probe() is None
    assert default.list_devices()[1].core_ids == (4, 5, 6, 7)
    lnc1 = NeuronPlugin({**tree_only(tree), "NEURON_LOGICAL_NC_CONFIG": "1"})
    assert lnc1.probe() is None
    assert lnc1.list_devices()[1].core_ids == tuple(range(8, 16))
    assert lnc1.host_info().core_count == 128


def test_sysfs_path_runs_no_subprocess_when_sysfs_gives_every_fact(
    tmp_path: Path, stub: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    def refuse(*a: object, **k: object) -> None:
        raise AssertionError("subprocess on the sysfs path")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    # Root reads links from sysfs; one PCI NUMA node needs no BDF map: neuron-ls,
    # although present, is not run. (A host whose Neuron functions span NUMA
    # nodes does run it: only it maps a device index to its BDF.)
    tree = build_tree(tmp_path / "t", "trn1.2xlarge", core_metrics=False)
    plugin = NeuronPlugin({**tree_only(tree), "RAYACCEL_NEURON_LS": str(stub)})
    assert plugin.probe() is None
    assert len(plugin.list_devices()) == 1


def _ls_env(stub: Path, tmp_path: Path, **extra: str) -> dict[str, str]:
    return ls_only(tmp_path, stub, **extra)


# neuron-ls alone cannot tell a lone 2-core Trainium from an Inferentia2.
LS_TYPES = {**TYPES, "trn1.2xlarge": None}


@pytest.mark.parametrize("preset", sorted(TYPES))
def test_neuron_ls_drives_discovery_without_sysfs(preset: str, stub: Path, tmp_path: Path) -> None:
    out = cli_json("devices", "--backend", "neuron", env=_ls_env(stub, tmp_path, STUB_PRESET=preset))
    expected = load_spec(preset).devices
    assert [d["core_ids"] for d in out["devices"]] == [list(d.core_ids) for d in expected]
    assert [d["peers"] for d in out["devices"]] == [list(d.peers) for d in expected]
    assert out["host"]["accelerator_type"] == LS_TYPES[preset]
    assert out["devices"][0]["pci_bus_id"] == "0000:10:1e.0"
    # Which processes hold a device is telemetry (NeuronTelemetry.device_holders),
    # asked when needed, not a snapshot frozen into the inventory.
    assert "pids" not in out["devices"][0]["attributes"]


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
    assert any(w.startswith("NUMA node of neuron:0-15 unknown") for w in out["host"]["warnings"])


def test_short_bdf_and_single_device(stub: Path, tmp_path: Path) -> None:
    out = cli_json(
        "devices", "--backend", "neuron", env=_ls_env(stub, tmp_path, STUB_MODE="short-bdf", STUB_PRESET="trn1.2xlarge")
    )
    assert out["devices"][0]["pci_bus_id"] == "0000:10:1e.0"
    assert out["devices"][0]["peers"] == []


def test_no_neuron_at_all(tmp_path: Path, cli: CliRunner) -> None:
    env = {"RAYACCEL_SYS_ROOT": str(tmp_path), "RAYACCEL_NEURON_DEV_ROOT": str(tmp_path), **no_tools()}
    out = cli_json("devices", env=env)
    neuron = next(p for p in out["plugins"] if p["name"] == "neuron")
    assert neuron["active"] is False and "no Neuron devices" in neuron["reason"]


def test_parse_output_edge_cases() -> None:
    (d,) = parse_output(
        '[{"neuron_device": 0, "bdf": "1e:00.0", "numa_node": "-1", "connected_to": null, "nc_count": 2}]'
    )
    # null links stay None (no key, or null): the merge treats them as "no links listed".
    assert (d.numa_node, d.connected, d.bdf, d.core_ids) == (-1, None, "0000:1e:00.0", None)
    with pytest.raises(NeuronLsError, match="nc_count"):
        parse_output('[{"neuron_device": 0}]')
    with pytest.raises(NeuronLsError, match="not a list"):
        parse_output('{"x": 1}')
    assert normalize_bdf("0000:10:1C.0") == "0000:10:1c.0"
    assert normalize_bdf(None) is None


def test_visible_ranges_through_plugin(tmp_path: Path) -> None:
    plugin = NeuronPlugin(tree_only(build_tree(tmp_path / "s", "trn1.32xlarge", core_metrics=False)))
    assert plugin.probe() is None
    assert plugin.parse_visible("0-3") == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="names 32, not on this host"):
        plugin.parse_visible("30-33")


def rdma_device(root: Path, name: str, driver: str | None) -> None:
    """/sys/class/infiniband/<name>, its `device/driver` linking to the PCI
    driver it is bound to (as sysfs links it), or no such link."""
    (root / name / "device").mkdir(parents=True)
    if driver is not None:
        (root / "drivers" / driver).mkdir(parents=True, exist_ok=True)
        (root / name / "device" / "driver").symlink_to(root / "drivers" / driver)


def test_efa_detection(tmp_path: Path) -> None:
    """An EFA device is one bound to the `efa` driver, whatever rdma-core's
    udev rules renamed it to; without a readable driver link, the name the
    driver registers (`efa_<n>`) says so."""
    ib = tmp_path / "ib"
    assert not efa_present(str(tmp_path / "missing"))
    ib.mkdir()
    assert not efa_present(str(ib))
    rdma_device(ib, "rdmap16s27", "mlx5_core")  # renamed, another driver's
    rdma_device(ib, "efa_3", "mlx5_core")  # a misleading name does not decide
    assert not efa_present(str(ib))
    rdma_device(ib, "rdmap0s6", "efa")
    assert efa_present(str(ib))
    other = tmp_path / "ib2"
    rdma_device(other, "efa_0", None)
    assert efa_present(str(other))
