"""Both sysfs layouts, read by feature: the driver's (2.24.7.0 to 2.30.2.0)
node by node, and a tree without those nodes (driver 2.31 moved them to
paths that are not published), which falls back to neuron-ls with the
reason in the warnings. And the Trainium3 health node `unhealthy_components`
(driver 2.30.2.0), whose reader nothing but these tests calls yet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ray_accel_neuron import limits, sysfs

from tests.badinput import badinput
from tests.cli_process import cli_json, run_cli
from tests.fakes.neuron_env import LS_STUB, executable, tree_and_ls, tree_only
from tests.fakes.neuron_sysfs import build_tree


@pytest.fixture
def stub(tmp_path: Path) -> Path:
    return executable(tmp_path / "neuron-ls", LS_STUB)


def neuron(out: dict[str, Any]) -> dict[str, Any]:
    return next(b for b in out["host"]["backends"] if b["plugin"] == "neuron")


def inventory(out: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What a plan uses: ids, cores, links, model, memory, NUMA."""
    return [
        (d["id"], d["core_ids"], sorted(d["peers"]), d["model"], d["memory_bytes"], d["numa_node"])
        for d in out["devices"]
    ]


def test_a_tree_without_the_known_nodes_has_them_absent_not_invented(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn2.48xlarge", core_metrics=False, layout="unrecognised")
    d = tree.device_dir(0)
    assert sorted(p.name for p in d.iterdir()) == ["dev", "subsystem", "uevent"]
    assert sorted(p.name for p in tree.dev_root.iterdir()) == sorted(f"neuron{i}" for i in range(16))
    devices = tuple(sysfs.read_device(i, str(tree.device_dir(i))) for i in range(16))
    problem = sysfs.layout_problem(devices)
    assert problem is not None and "not the layout of Neuron drivers 2.24 to 2.30" in problem
    old = tuple(sysfs.read_device(i, str(build_tree(tmp_path / "o", "trn2.48xlarge").device_dir(i))) for i in (0,))
    assert sysfs.layout_problem(old) is None


@pytest.mark.parametrize("accepts", ["old", "new"])
def test_an_unrecognised_tree_falls_back_to_neuron_ls_for_the_same_inventory(
    accepts: str, tmp_path: Path, stub: Path
) -> None:
    fixture = "trn2.48xlarge.json" if accepts == "old" else "trn2.48xlarge-output-format-json-ASSUMED.json"
    known = build_tree(tmp_path / "known", "trn2.48xlarge", core_metrics=False)
    moved = build_tree(tmp_path / "moved", "trn2.48xlarge", core_metrics=False, layout="unrecognised")
    before = cli_json("devices", "--backend", "neuron", env=tree_and_ls(known, stub, "trn2.48xlarge.json"))
    after = cli_json("devices", "--backend", "neuron", env=tree_and_ls(moved, stub, fixture, STUB_ACCEPTS=accepts))
    assert inventory(after) == inventory(before)
    assert after["host"]["core_count"] == 64 and after["host"]["accelerator_type"] == "Trainium2"
    warnings = neuron(after)["warnings"]
    (layout,) = [w for w in warnings if w.startswith("sysfs layout not recognised")]
    assert "driver 2.31 moved sysfs nodes" in layout and "facts from neuron-ls" in layout
    text = run_cli("devices", "--backend", "neuron", env=tree_and_ls(moved, stub, fixture, STUB_ACCEPTS=accepts))
    assert f"warning (neuron): {layout}" in text.stdout


def test_an_unrecognised_trainium3_tree_with_neuron_ls_is_trainium3(tmp_path: Path, stub: Path) -> None:
    known = build_tree(tmp_path / "known", "trn3.48xlarge", core_metrics=False)
    moved = build_tree(tmp_path / "moved", "trn3.48xlarge", core_metrics=False, layout="unrecognised")
    before = cli_json("devices", "--backend", "neuron", env=tree_only(known))
    env = {**tree_only(moved), "RAYACCEL_NEURON_LS": str(stub), "STUB_PRESET": "trn3.48xlarge", "STUB_ACCEPTS": "new"}
    after = cli_json("devices", "--backend", "neuron", env=env)
    # Same devices, cores, links and type; the stub's BDFs differ from the tree's placeholders.
    assert [x[:5] for x in inventory(after)] == [x[:5] for x in inventory(before)]
    assert after["host"]["instance_type"] == "trn3.48xlarge"


@badinput("unnamed")
def test_an_unrecognised_tree_without_neuron_ls_is_inactive_with_both_reasons(tmp_path: Path) -> None:
    moved = build_tree(tmp_path / "moved", "trn2.48xlarge", core_metrics=False, layout="unrecognised")
    proc = run_cli("devices", "--json", env=tree_only(moved))
    assert proc.returncode == 0, proc.stderr
    status = next(p for p in json.loads(proc.stdout)["plugins"] if p["name"] == "neuron")
    assert status["active"] is False
    assert status["reason"].startswith("sysfs layout not recognised:")
    assert "neuron-ls, the fallback, is unavailable (not found" in status["reason"]


def test_a_node_moved_alone_is_a_missing_fact_not_a_new_layout(tmp_path: Path) -> None:
    # One node gone while the others are where they were: the rest is still read.
    tree = build_tree(tmp_path / "t", "trn1.2xlarge", core_metrics=False)
    for i in range(1):
        (tree.device_dir(i) / "core_count").unlink()
    out = cli_json("devices", "--backend", "neuron", env=tree_only(tree))
    d = out["devices"][0]
    assert d["core_ids"] == [0, 1] and d["attributes"]["source.physical_cores"] == "sysfs neuron_coreN directories"
    assert not any(w.startswith("sysfs layout") for w in neuron(out)["warnings"])


# ---------------------------------------------------------------------------
# unhealthy_components (Trainium3, driver 2.30.2.0)
# ---------------------------------------------------------------------------


def test_the_health_reader_on_a_trainium3_tree(tmp_path: Path) -> None:
    tree = build_tree(
        tmp_path / "t", "trn3e.24xlarge", core_metrics=False, unhealthy={1: "hbm,link_efa", 2: "device_unreachable"}
    )
    root = str(tree.neuron_root)
    healthy, why = sysfs.unhealthy_components(root, 0)
    assert why is None and healthy is not None and healthy.healthy
    bad, _ = sysfs.unhealthy_components(root, 1)
    assert bad is not None and bad.components == ("hbm", "link_efa") and not bad.healthy and bad.unknown == ()
    gone, _ = sysfs.unhealthy_components(root, 2)
    assert gone is not None and gone.unreachable and not gone.healthy
    health = tree.device_dir(0) / "stats" / "hardware" / "health_status"
    assert sorted(p.name for p in health.iterdir()) == [
        "healthcheck_heartbeat",
        "hw_error_event",
        "unhealthy_components",
    ]


def test_the_health_node_is_absent_before_trainium3(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn2.3xlarge", core_metrics=False)
    reading, why = sysfs.unhealthy_components(str(tree.neuron_root), 0)
    assert reading is None and why is not None and why.endswith("unhealthy_components: absent")


@badinput("traceback")
def test_a_garbled_health_node_is_named() -> None:
    for text in ("hbm,,sram\n", "HBM\n", "hbm,hbm\n", "hbm,device_unreachable\n", "x" * 600, "hbm é\n"):
        with pytest.raises(limits.BadData, match="unhealthy_components"):
            sysfs.parse_unhealthy_components(text, "/sys/x/unhealthy_components")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([*sysfs.HEALTH_COMPONENTS, "link_optical"]), unique=True, max_size=11))
def test_unhealthy_components_round_trip(names: list[str]) -> None:
    # The driver joins the names of the set bits with ',' and ends with '\n'; an empty set is '\n'.
    got = sysfs.parse_unhealthy_components(",".join(names) + "\n", "unhealthy_components")
    assert got.components == tuple(names) and not got.unreachable
    assert got.healthy == (not names)
    # A name a newer driver may add is kept and reported, not refused.
    assert got.unknown == tuple(n for n in names if n == "link_optical")


@badinput("traceback")
@settings(max_examples=300, deadline=None)
@given(st.text(max_size=600))
def test_the_health_parser_raises_only_its_own_error(text: str) -> None:
    try:
        got = sysfs.parse_unhealthy_components(text, "unhealthy_components")
    except limits.BadData as e:
        assert "unhealthy_components" in str(e)
        return
    assert all(c.isascii() and c for c in got.components)
