"""Trainium3 discovery: sysfs trees with the strings of the Neuron driver
2.30.2.0 (tests/fakes/neuron_sysfs.py), neuron-ls with either output flag
(tests/fakes/neuron_ls_stub.py), PCI ids, and the mock presets of its three
shapes. Links are all to all by the architecture (trn3-arch.rst), never the
Trn2 torus the driver prints as a placeholder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ray_accel_neuron import arch, identity, limits
from ray_accel_neuron.sysfs import PciFunction, Reading

from tests.cli_process import cli_json, run_cli
from tests.fakes.neuron_env import LS_STUB, executable, ls_only, tree_only
from tests.fakes.neuron_sysfs import TRN2, build_tree, connected_devices_text, denied_reads_env, driver_links

GIB = 1024**3
TRN3_SHAPES = {"trn3.48xlarge": 16, "trn3e.24xlarge": 4, "trn3pd98.3xlarge": 1}


@pytest.fixture
def stub(tmp_path: Path) -> Path:
    return executable(tmp_path / "neuron-ls", LS_STUB)


def backend_info(out: dict[str, Any]) -> dict[str, Any]:
    return next(b for b in out["host"]["backends"] if b["plugin"] == "neuron")


def test_a_16_device_tree_lists_16_trainium3_with_4_logical_cores_each(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn3.48xlarge", core_metrics=False)
    assert sorted(p.name for p in tree.dev_root.iterdir()) == sorted(f"neuron{i}" for i in range(16))
    env = tree_only(tree)
    out = cli_json("devices", "--backend", "neuron", env=env)
    devices = out["devices"]
    assert [d["id"] for d in devices] == [f"neuron:{i}" for i in range(16)]
    assert {d["model"] for d in devices} == {"Trainium3"}
    assert [d["core_ids"] for d in devices] == [list(range(4 * i, 4 * i + 4)) for i in range(16)]
    assert {d["memory_bytes"] for d in devices} == {144 * GIB}
    assert {(d["attributes"]["physical_cores"], d["attributes"]["logical_core_size"]) for d in devices} == {("8", "2")}
    assert {d["attributes"]["source.logical_core_size"] for d in devices} == {"default for Trainium3"}
    assert {d["architecture"] for d in devices} == {"NDv4"}
    host = out["host"]
    assert (host["accelerator_type"], host["core_count"], host["device_count"]) == ("Trainium3", 64, 16)
    neuron = backend_info(out)
    assert neuron["attributes"]["source.accelerator_type"] == "sysfs info/architecture/device_name"
    # Every fact came from sysfs and the architecture; only the instance stays open.
    assert [w.split(":")[0] for w in neuron["warnings"]] == ["instance type unknown"]

    text = run_cli("devices", "--backend", "neuron", env=env)
    assert text.returncode == 0, text.stderr
    assert text.stdout.count("Trainium3") >= 16

    plan = cli_json("plan", "--partitions", "2", "--backend", "neuron", env=env)
    parts = plan["partitions"]
    assert [p["device_ids"] for p in parts] == [
        [f"neuron:{i}" for i in range(8)],
        [f"neuron:{i}" for i in range(8, 16)],
    ]
    assert [p["core_ids"] for p in parts] == [list(range(32)), list(range(32, 64))]
    assert [p["accelerator_type"] for p in parts] == ["Trainium3", "Trainium3"]
    assert [p["connected"] for p in parts] == [True, True]


def test_the_placeholder_torus_in_connected_devices_is_not_used(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn3.48xlarge", core_metrics=False)
    # What the 2.30 driver prints: the Trn2 table ("TODO PDS update").
    assert (tree.device_dir(0) / "connected_devices").read_text() == connected_devices_text(driver_links(TRN2, 16, 0))
    out = cli_json("devices", "--backend", "neuron", env=tree_only(tree))
    for d in out["devices"]:
        assert sorted(d["peers"]) == sorted(f"neuron:{j}" for j in range(16) if j != d["index"])
        assert d["attributes"]["source.peers"].startswith("architecture: Trainium3 devices are linked all to all")


@pytest.mark.parametrize(("instance", "count"), sorted(TRN3_SHAPES.items()))
def test_every_trainium3_shape_is_discovered_and_plans(instance: str, count: int, tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", instance, core_metrics=False)
    env = tree_only(tree)
    out = cli_json("devices", "--backend", "neuron", env=env)
    assert len(out["devices"]) == count and out["host"]["core_count"] == 4 * count
    assert {len(d["peers"]) for d in out["devices"]} == {count - 1}
    # The driver knows several instance names per shape: unknown, with them listed.
    neuron = backend_info(out)
    assert neuron["instance_type"] == "unknown"
    assert any(w.startswith("instance type unknown") and instance in w for w in neuron["warnings"])
    parts = 2 if count > 1 else 1
    plan = cli_json("plan", "--partitions", str(parts), "--backend", "neuron", env=env)
    assert sorted(c for p in plan["partitions"] for c in p["core_ids"]) == list(range(4 * count))


def test_neuron_logical_nc_config_overrides_the_default(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn3.48xlarge", core_metrics=False)
    out = cli_json("devices", "--backend", "neuron", env=tree_only(tree, NEURON_LOGICAL_NC_CONFIG="1"))
    assert out["host"]["core_count"] == 128
    assert out["devices"][15]["core_ids"] == list(range(120, 128))
    assert out["devices"][0]["attributes"]["source.logical_core_size"] == "NEURON_LOGICAL_NC_CONFIG"


def test_dmi_names_the_instance(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn3.48xlarge", core_metrics=False, dmi_product_name="trn3.48xlarge")
    out = cli_json("devices", "--backend", "neuron", env=tree_only(tree))
    assert out["host"]["instance_type"] == "trn3.48xlarge"


def test_a_container_with_one_device_sees_the_others_as_external(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn3.48xlarge", dev_nodes=[5], core_metrics=False)
    out = cli_json("devices", "--backend", "neuron", env=tree_only(tree))
    (d,) = out["devices"]
    assert d["core_ids"] == [20, 21, 22, 23] and d["peers"] == []
    assert sorted(d["external_peers"]) == sorted(f"neuron:{j}" for j in range(16) if j != 5)


def test_non_root_needs_no_neuron_ls_for_trainium3_links(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn3.48xlarge", core_metrics=False)
    env = {**tree_only(tree), **denied_reads_env(tree.root_only, tmp_path / "site")}
    out = cli_json("devices", "--backend", "neuron", env=env)
    assert out["host"]["core_count"] == 64
    assert {len(d["peers"]) for d in out["devices"]} == {15}
    warnings = backend_info(out)["warnings"]
    assert not any("links of" in w for w in warnings)
    (denied,) = [w for w in warnings if "not readable by this user" in w]
    assert denied.endswith("neuron{0-15}/{core_count}; cores counted from neuron_coreN directories")


@pytest.mark.parametrize("accepts", ["old", "new"])
def test_neuron_ls_alone_tells_trainium3_by_its_shape(accepts: str, tmp_path: Path, stub: Path) -> None:
    env = ls_only(tmp_path, stub, STUB_PRESET="trn3.48xlarge", STUB_ACCEPTS=accepts)
    out = cli_json("devices", "--backend", "neuron", env=env)
    assert out["host"]["accelerator_type"] == "Trainium3"
    assert [d["core_ids"] for d in out["devices"]] == [list(range(4 * i, 4 * i + 4)) for i in range(16)]
    assert {len(d["peers"]) for d in out["devices"]} == {15}
    neuron = backend_info(out)
    if accepts == "new":
        # The assumed new format carries the instance type at the top level.
        assert neuron["instance_type"] == "trn3.48xlarge"
        source = neuron["attributes"]["source.accelerator_type"]
        assert source == "instance type trn3.48xlarge (neuron-ls instance_type)"
    else:
        assert neuron["attributes"]["source.accelerator_type"].startswith(
            "shape: neuron-ls prints logical_neuroncore_config and memory_size of 144 GiB"
        )


def _reading(text: str | None) -> Reading:
    return Reading("/sys/x", text, None if text is not None else "permission denied")


@pytest.mark.parametrize("device_id", [0x7564, 0x7565])
def test_either_pci_id_names_trainium3(device_id: int) -> None:
    fn = PciFunction("0000:10:00.0", device_id, -1, None)
    decision = identity.generation({0: _reading(None)}, {}, {0: fn.bdf}, {fn.bdf: fn}, [device_id], [], [])
    assert decision.generation is arch.TRAINIUM3 and decision.source == "PCI device id"
    assert decision.warnings == ()


def test_arch_type_ndv4_names_trainium3_and_contradictions_are_refused() -> None:
    decision = identity.generation({0: _reading(None)}, {0: _reading("NDv4\n")}, {}, {}, [], [], [])
    assert decision.generation is arch.TRAINIUM3
    with pytest.raises(limits.BadData, match="sysfs device_name says Trainium3, PCI device id says Trainium2"):
        identity.generation({0: _reading("Trainium3\n")}, {}, {}, {}, [0x7364], [], [])
    with pytest.raises(limits.BadData, match="'NDv3', which no Trainium3 has"):
        identity.generation({0: _reading("Trainium3\n")}, {0: _reading("NDv3\n")}, {}, {}, [], [], [])


@pytest.mark.parametrize(("preset", "parts"), [("trn3.48xlarge", 2), ("trn3e.24xlarge", 2), ("trn3pd98.3xlarge", 1)])
def test_mock_presets_of_each_trainium3_shape_plan(preset: str, parts: int) -> None:
    plan = cli_json("plan", "--partitions", str(parts), env={"RAYACCEL_MOCK": preset})
    partitions = plan["partitions"]
    assert len(partitions) == parts
    assert {p["accelerator_type"] for p in partitions} == {"Trainium3"}
    total = TRN3_SHAPES[preset]
    assert all(p["connected"] for p in partitions) or total == 1
    assert sorted(c for p in partitions for c in p["core_ids"]) == list(range(4 * total))
