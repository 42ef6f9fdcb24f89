"""Unknown is not wrong: a Neuron device, name, PCI id or arch string the
backend's table does not hold keeps the backend active with what the data
shows and a warning naming the value; only data that contradicts itself
turns it off. The made-up generation here (Trainium9) is a tree laid out as
the driver lays out any generation (tests/fakes/neuron_sysfs.py), with
strings no driver has written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ray_accel_neuron import arch

from tests.cli_process import cli_json, run_cli
from tests.fakes.neuron_env import tree_only
from tests.fakes.neuron_sysfs import Generation, build_tree

TRN9 = Generation("trn9", 0x7964, 8, "NDv9", "NCv9", "Trn9", "Trainium9")
# Ray 2.60 label values (ray/_private/label_utils.py LABEL_REGEX).
LABEL_VALUE = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9_.-]{0,61}[a-zA-Z0-9])?$")


def neuron(out: dict[str, Any]) -> dict[str, Any]:
    return next(b for b in out["host"]["backends"] if b["plugin"] == "neuron")


def status(out: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in out["plugins"] if p["name"] == "neuron")


def test_a_made_up_generation_is_active_warned_about_and_plans(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn3.48xlarge", core_metrics=False, generation=TRN9)
    env = tree_only(tree)
    out = cli_json("devices", "--backend", "neuron", env=env)
    assert status(out)["active"] is True
    host = out["host"]
    assert host["accelerator_type"] == "Trainium9"
    assert {d["model"] for d in out["devices"]} == {"Trainium9"}
    # No known default logical core size: one logical core per physical core.
    assert [d["core_ids"] for d in out["devices"]][1] == list(range(8, 16))
    assert host["core_count"] == 128
    warnings = neuron(out)["warnings"]
    assert any("'Trainium9'" in w and "not a Neuron device this backend knows" in w for w in warnings)
    assert any("'NDv9'" in w for w in warnings)
    assert any("0x7964" in w for w in warnings)
    assert any(w.startswith("logical cores of neuron:0-15: no known default for Trainium9") for w in warnings)
    assert any(w.startswith("memory size of neuron:0-15 unknown") for w in warnings)
    # The links the data shows: this made-up driver prints none.
    assert all(d["peers"] == [] for d in out["devices"])

    text = run_cli("devices", "--backend", "neuron", env=env)
    assert text.returncode == 0 and "Trainium9" in text.stdout and "warning (neuron)" in text.stdout

    plan = cli_json("plan", "--partitions", "2", "--backend", "neuron", env=env)
    assert [p["core_ids"] for p in plan["partitions"]] == [list(range(64)), list(range(64, 128))]
    assert {p["accelerator_type"] for p in plan["partitions"]} == {"Trainium9"}


def test_the_users_logical_core_size_applies_to_an_unknown_generation(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn3e.24xlarge", core_metrics=False, generation=TRN9)
    out = cli_json("devices", "--backend", "neuron", env=tree_only(tree, NEURON_LOGICAL_NC_CONFIG="2"))
    assert out["host"]["core_count"] == 16
    assert not any(w.startswith("logical cores of") for w in neuron(out)["warnings"])


def test_an_unknown_name_with_a_known_pci_id_is_that_generation_with_a_warning(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn3e.24xlarge", core_metrics=False)
    for i in range(4):
        (tree.device_dir(i) / "info" / "architecture" / "device_name").write_text("Trainium3 Gen2\n")
    out = cli_json("devices", "--backend", "neuron", env=tree_only(tree))
    assert out["host"]["accelerator_type"] == "Trainium3"
    assert any("'Trainium3 Gen2'" in w for w in neuron(out)["warnings"])


def test_a_name_that_is_no_label_value_is_made_one(tmp_path: Path) -> None:
    odd = Generation("odd", 0x7964, 2, "NDv9", "NCv9", "Odd", "Trainium 9 (eng) ")
    tree = build_tree(tmp_path / "t", "trn3pd98.3xlarge", core_metrics=False, generation=odd)
    out = cli_json("devices", "--backend", "neuron", env=tree_only(tree))
    assert out["host"]["accelerator_type"] == "Trainium-9-eng"
    assert out["host"]["core_count"] == 2


def test_two_unknown_names_on_one_host_contradict_each_other(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn3e.24xlarge", core_metrics=False, generation=TRN9)
    (tree.device_dir(2) / "info" / "architecture" / "device_name").write_text("Trainium10\n")
    proc = run_cli("devices", "--json", env=tree_only(tree))
    assert proc.returncode == 0
    import json

    st_ = next(p for p in json.loads(proc.stdout)["plugins"] if p["name"] == "neuron")
    assert st_["active"] is False
    assert "name different generations on one host" in st_["reason"] and "Trainium10" in st_["reason"]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_safe_type_is_a_ray_label_value_or_none(name: str) -> None:
    out = arch.safe_type(name)
    assert out is None or LABEL_VALUE.match(out)
    if out is not None:
        assert arch.reported(name) is not None and not arch.reported(name).known  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["Trainium1", "Trainium2", "Trainium3", "Inferentia2"])
def test_known_names_are_their_own_safe_type(name: str) -> None:
    g = arch.from_device_name(name)
    assert g is not None and arch.safe_type(g.accelerator_type) == g.accelerator_type
