"""Neuron discovery at the CLI, on published neuron-ls output and
driver-faithful sysfs trees (tests/fixtures/neuron/CATALOGUE.md,
tests/fakes/neuron_sysfs.py::build_tree). Every seam is set (see
tests/fakes/neuron_env.py), so nothing of this machine's /sys leaks in."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cli_process import cli_json as cli_json_subprocess
from tests.cli_process import run_cli
from tests.clirun import cli_json_here as cli_json
from tests.clirun import run_cli_here
from tests.fakes.neuron_env import LS_STUB, executable, ls_only, tree_and_ls, tree_only
from tests.fakes.neuron_sysfs import INSTANCES, NeuronSysfs, build_tree, denied_reads_env, driver_links

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "neuron" / "neuron-ls"


@pytest.fixture
def stub(tmp_path: Path) -> Path:
    return executable(tmp_path / "neuron-ls", LS_STUB)


def neuron_status(out: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in out["plugins"] if p["name"] == "neuron")


def backend_info(out: dict[str, Any]) -> dict[str, Any]:
    return next(b for b in out["host"]["backends"] if b["plugin"] == "neuron")


def fixture(name: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads((FIXTURES / name).read_text())
    return data


# ---------------------------------------------------------------------------
# 1. trn2.48xlarge: 16 devices x 4 logical cores, ids 0-63, by every path
# ---------------------------------------------------------------------------

Env = Callable[[Path, Path], dict[str, str]]
TRN2_PATHS: dict[str, Env] = {
    "neuron-ls alone": lambda tmp, stub: ls_only(tmp, stub, "trn2.48xlarge.json"),
    "sysfs alone": lambda tmp, stub: tree_only(build_tree(tmp / "t", "trn2.48xlarge", core_metrics=False)),
    "sysfs and neuron-ls": lambda tmp, stub: tree_and_ls(
        build_tree(tmp / "t", "trn2.48xlarge", core_metrics=False), stub, "trn2.48xlarge.json"
    ),
}


@pytest.mark.parametrize("path", sorted(TRN2_PATHS))
def test_trn2_has_64_logical_cores_and_plans_in_halves(path: str, tmp_path: Path, stub: Path) -> None:
    env = TRN2_PATHS[path](tmp_path, stub)
    out = cli_json("devices", "--backend", "neuron", env=env)
    devices = out["devices"]
    assert [d["index"] for d in devices] == list(range(16))
    assert [d["core_ids"] for d in devices] == [list(range(4 * i, 4 * i + 4)) for i in range(16)]
    assert out["host"]["core_count"] == 64 and out["host"]["accelerator_type"] == "Trainium2"
    assert {d["attributes"]["physical_cores"] for d in devices} == {"8"}
    assert {d["attributes"]["logical_core_size"] for d in devices} == {"2"}
    # Each fact says where it came from.
    sources = {d["attributes"]["source.core_ids"] for d in devices}
    assert sources == ({"neuron-ls neuroncore_ids"} if "neuron-ls" in path else {"sysfs core_count (physical / LNC 2)"})

    plan = cli_json("plan", "--partitions", "2", "--backend", "neuron", env=env)
    parts = plan["partitions"]
    assert [p["device_ids"] for p in parts] == [
        [f"neuron:{i}" for i in range(8)],
        [f"neuron:{i}" for i in range(8, 16)],
    ]
    assert [p["core_ids"] for p in parts] == [list(range(32)), list(range(32, 64))]


def test_lnc1_output_is_taken_as_given(tmp_path: Path, stub: Path) -> None:
    # neuron-ls at logical_neuroncore_config 1 prints 8 cores per Trainium2: 128 in all.
    out = cli_json("devices", "--backend", "neuron", env=ls_only(tmp_path, stub, "trn2.48xlarge-lnc1.json"))
    assert out["host"]["core_count"] == 128
    assert out["devices"][15]["core_ids"] == list(range(120, 128))


def test_user_lnc_that_differs_from_the_tool_renumbers_with_a_warning(tmp_path: Path, stub: Path) -> None:
    env = ls_only(tmp_path, stub, "trn2.48xlarge-lnc1.json", NEURON_LOGICAL_NC_CONFIG="2")
    out = cli_json("devices", "--backend", "neuron", env=env)
    assert out["host"]["core_count"] == 64
    assert any("renumbered" in w for w in backend_info(out)["warnings"])


def test_older_trn2_tool_without_ids_numbers_by_device_index(tmp_path: Path, stub: Path) -> None:
    out = cli_json("devices", "--backend", "neuron", env=ls_only(tmp_path, stub, "trn2.48xlarge-tools-2.22.json"))
    assert [d["core_ids"] for d in out["devices"]][5] == [20, 21, 22, 23]


# ---------------------------------------------------------------------------
# 2. A container with one trn2 device: external links, never an abort
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["container-trn2.48xlarge-device0.json", "container-trn2.48xlarge-device5.json"])
def test_container_device_keeps_host_links_as_external(name: str, tmp_path: Path, stub: Path) -> None:
    env = ls_only(tmp_path, stub, name)
    out = cli_json("devices", "--backend", "neuron", env=env)
    (entry,) = fixture(name)
    (d,) = out["devices"]
    assert d["index"] == entry["neuron_device"]
    assert d["core_ids"] == entry["neuroncore_ids"]  # host numbering: 20-23 for device 5
    assert d["peers"] == []
    assert sorted(d["external_peers"]) == sorted(f"neuron:{p}" for p in entry["connected_to"])
    text = run_cli_here("devices", "--backend", "neuron", env=env)
    assert text.returncode == 0 and "EXTERNAL" in text.stdout and d["external_peers"][0] in text.stdout

    plan = run_cli_here("plan", "--partitions", "2", "--backend", "neuron", env=env)
    assert plan.returncode == 2
    assert "more partitions (2) than devices (1)" in plan.stderr
    assert "peer" not in plan.stderr


def test_container_view_of_sysfs_uses_only_the_mounted_device(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn2.48xlarge", dev_nodes=[5], core_metrics=False)
    out = cli_json("devices", "--backend", "neuron", env=tree_only(tree))
    (d,) = out["devices"]
    assert d["id"] == "neuron:5" and d["core_ids"] == [20, 21, 22, 23]
    assert sorted(d["external_peers"]) == sorted(f"neuron:{p}" for p in driver_links(tree.generation, 16, 5))
    assert any("neuron:0-4,6-15 are in sysfs but cannot be opened here" in w for w in backend_info(out)["warnings"])


# ---------------------------------------------------------------------------
# 3. Generation and instance type without DMI
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("instance", ["inf2.24xlarge", "inf2.48xlarge"])
def test_inf2_from_published_tables_is_inferentia2(instance: str, tmp_path: Path, stub: Path) -> None:
    out = cli_json("devices", "--backend", "neuron", env=ls_only(tmp_path, stub, f"{instance}.json"))
    assert out["host"]["accelerator_type"] == "Inferentia2"
    assert {d["model"] for d in out["devices"]} == {"Inferentia2"}
    # Six in a line and twelve in a ring are each one instance only.
    assert out["host"]["instance_type"] == instance
    assert backend_info(out)["attributes"]["source.instance_type"].startswith("shape:")


@pytest.mark.parametrize("name", ["trn1.2xlarge.json", "inf2.xlarge.json"])
def test_one_device_without_any_type_is_unknown_with_the_reason(name: str, tmp_path: Path, stub: Path) -> None:
    out = cli_json("devices", "--backend", "neuron", env=ls_only(tmp_path, stub, name))
    info = backend_info(out)
    assert info["instance_type"] == "unknown"
    assert info["accelerator_type"] is None
    assert out["devices"][0]["model"] == "unknown"
    assert "Trainium and Inferentia2 look the same" in info["attributes"]["source.accelerator_type"]
    assert any(
        w.startswith("instance type unknown:") and "neuron-ls printed no instance_type" in w for w in info["warnings"]
    )


@pytest.mark.parametrize(
    ("name", "expected"), [("trn2.3xlarge.json", "trn2.3xlarge"), ("trn2.48xlarge-instance-type.json", "trn2.48xlarge")]
)
def test_neuron_ls_instance_type_sets_the_host(name: str, expected: str, tmp_path: Path, stub: Path) -> None:
    out = cli_json("devices", "--backend", "neuron", env=ls_only(tmp_path, stub, name))
    assert out["host"]["instance_type"] == expected
    assert backend_info(out)["attributes"]["source.instance_type"] == "neuron-ls instance_type"


@pytest.mark.parametrize(
    ("instance", "accelerator", "instance_type"),
    [
        # A lone Inferentia2 is told from trn1.2xlarge by
        # sysfs device_name (readable by anyone); only the instance stays open.
        ("inf2.xlarge", "Inferentia2", "unknown"),
        ("trn1.2xlarge", "Trainium", "trn1.2xlarge"),
        ("trn2.3xlarge", "Trainium2", "trn2.3xlarge"),
        ("trn1.32xlarge", "Trainium", "unknown"),  # trn1 or trn1n
    ],
)
def test_sysfs_names_the_generation_and_never_uses_the_family_as_instance(
    instance: str, accelerator: str, instance_type: str, tmp_path: Path
) -> None:
    tree = build_tree(tmp_path / "t", instance, core_metrics=False)
    out = cli_json("devices", "--backend", "neuron", env=tree_only(tree))
    assert out["host"]["accelerator_type"] == accelerator
    assert out["host"]["instance_type"] == instance_type  # never "Trn1"/"Inf2"/"Trn2"


def test_dmi_settles_a_lone_device_seen_only_through_neuron_ls(tmp_path: Path, stub: Path) -> None:
    dmi = tmp_path / "sys" / "devices" / "virtual" / "dmi" / "id" / "product_name"
    dmi.parent.mkdir(parents=True)
    dmi.write_text("trn1.2xlarge\n")
    env = {**ls_only(tmp_path, stub, "trn1.2xlarge.json"), "RAYACCEL_SYS_ROOT": str(tmp_path / "sys")}
    out = cli_json("devices", "--backend", "neuron", env=env)
    assert (out["host"]["accelerator_type"], out["host"]["instance_type"]) == ("Trainium", "trn1.2xlarge")
    assert backend_info(out)["attributes"]["source.instance_type"] == "DMI product_name"


def test_dmi_gives_the_instance_type(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn1.32xlarge", core_metrics=False, dmi_product_name="trn1n.32xlarge")
    out = cli_json("devices", "--backend", "neuron", env=tree_only(tree))
    assert out["host"]["instance_type"] == "trn1n.32xlarge"
    assert backend_info(out)["attributes"]["source.instance_type"] == "DMI product_name"


# ---------------------------------------------------------------------------
# 4. Non-root: root-only files unreadable, neuron-ls gives the links
# ---------------------------------------------------------------------------


# The denied reads are a `sitecustomize` on the child's PYTHONPATH
# (tests/fakes/neuron_sysfs.py), so these run the console script.
def _non_root_env(tree: NeuronSysfs, tmp_path: Path, stub: Path, fixture_name: str) -> dict[str, str]:
    return {**tree_and_ls(tree, stub, fixture_name), **denied_reads_env(tree.root_only, tmp_path / "site")}


def test_non_root_gets_links_from_neuron_ls_with_a_warning(tmp_path: Path, stub: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn1.32xlarge", core_metrics=False)
    env = _non_root_env(tree, tmp_path, stub, "trn1.32xlarge.json")
    out = cli_json_subprocess("devices", "--backend", "neuron", env=env)
    gen, total = INSTANCES["trn1.32xlarge"]
    for d in out["devices"]:
        assert sorted(d["peers"]) == sorted(f"neuron:{p}" for p in driver_links(gen, total, d["index"]))
        assert d["attributes"]["source.peers"] == "neuron-ls connected_to"
        assert d["attributes"]["source.physical_cores"] == "sysfs neuron_coreN directories"
    warning = backend_info(out)["warnings"][0]
    assert "not readable by this user" in warning
    assert "neuron{0-15}/{connected_devices,core_count}" in warning
    text = run_cli("devices", "--backend", "neuron", env=env)
    assert f"warning (neuron): {warning}" in text.stdout
    plan = cli_json_subprocess("plan", "--partitions", "2", "--backend", "neuron", env=env)
    assert [p["connected"] for p in plan["partitions"]] == [True, True]
    assert all("connected=yes" in p["quality"] for p in plan["partitions"])


def test_non_root_without_neuron_ls_says_links_are_unknown(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn1.32xlarge", core_metrics=False)
    env = {**tree_only(tree), **denied_reads_env(tree.root_only, tmp_path / "site")}
    out = cli_json_subprocess("devices", "--backend", "neuron", env=env)
    assert all(d["peers"] == [] for d in out["devices"])
    warnings = backend_info(out)["warnings"]
    assert any(w.startswith("links of neuron:0-15 unknown") for w in warnings)
    assert all(d["attributes"]["source.peers"].startswith("unknown:") for d in out["devices"])


# ---------------------------------------------------------------------------
# 5. NUMA on the sysfs path from the BDF's PCI node
# ---------------------------------------------------------------------------


def test_numa_comes_from_the_pci_function_of_the_bdf(tmp_path: Path, stub: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn1.32xlarge", core_metrics=False)
    # The older tool prints BDFs but no numa_node: the node can only come from PCI sysfs.
    out = cli_json("devices", "--backend", "neuron", env=tree_and_ls(tree, stub, "trn1.32xlarge-tools-pre2.25.json"))
    for d in out["devices"]:
        pci = tree.pci[d["index"]]
        assert d["pci_bus_id"] == pci.bdf
        assert d["numa_node"] == pci.numa_node
        assert d["attributes"]["source.numa_node"] == f"PCI {pci.bdf}/numa_node"
    assert {d["numa_node"] for d in out["devices"]} == {0, 1}


def test_sysfs_alone_on_a_two_node_host_warns_that_numa_is_unknown(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn1.32xlarge", core_metrics=False)
    out = cli_json("devices", "--backend", "neuron", env=tree_only(tree))
    assert {d["numa_node"] for d in out["devices"]} == {-1}
    assert any(w.startswith("NUMA node of neuron:0-15 unknown") for w in backend_info(out)["warnings"])


def test_sysfs_alone_with_one_pci_numa_node_needs_no_neuron_ls(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn1.2xlarge", core_metrics=False)
    out = cli_json("devices", "--backend", "neuron", env=tree_only(tree))
    (d,) = out["devices"]
    assert d["numa_node"] == tree.pci[0].numa_node
    assert d["attributes"]["source.numa_node"].startswith("PCI: all 1 Neuron functions are on NUMA node")
    assert backend_info(out)["warnings"] == []
