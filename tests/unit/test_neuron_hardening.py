"""Hardening of Neuron discovery, and the rule for discovery errors.

What the machine reports (sysfs, neuron-ls output) that cannot be used makes
the backend inactive with a reason naming the value: `devices` exits 0 and
lists it. Only what the user configured (variables, a mock spec) exits 2.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from ray_accel_neuron import limits, sysfs

from tests.badinput import badinput
from tests.cli_process import run_cli
from tests.clirun import cli_json_here as cli_json
from tests.clirun import run_cli_here
from tests.fakes.neuron_env import LS_STUB, executable, ls_only, tree_only
from tests.fakes.neuron_sysfs import build_tree
from tests.tagged import new_tag, tagged

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "neuron" / "neuron-ls"


@pytest.fixture
def stub(tmp_path: Path) -> Path:
    return executable(tmp_path / "neuron-ls", LS_STUB)


def neuron(out: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in out["plugins"] if p["name"] == "neuron")


def inactive_reason(env: dict[str, str]) -> str:
    proc = run_cli("devices", "--json", env=env, timeout=30)
    assert proc.returncode == 0, proc.stderr  # never exit 2 for what the machine says
    status = neuron(json.loads(proc.stdout))
    assert status["active"] is False
    reason: str = status["reason"]
    return reason


# ---------------------------------------------------------------------------
# A FIFO where a sysfs file should be: a clear error within 2 s
# ---------------------------------------------------------------------------


@badinput("dangerous")
@pytest.mark.parametrize("name", ["core_count", "connected_devices"])
def test_a_fifo_in_sysfs_is_refused_without_blocking(name: str, tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn1.2xlarge", core_metrics=False)
    target = tree.device_dir(0) / name
    target.unlink()
    os.mkfifo(target)
    start = time.monotonic()
    reason = inactive_reason(tree_only(tree))
    # Opening a FIFO with no writer blocks for ever: any bound tells the two
    # apart, and a loose one keeps a loaded machine from failing it.
    assert time.monotonic() - start < 30
    assert f"{target} is a FIFO, not a regular file" in reason


# ---------------------------------------------------------------------------
# Counts past the documented maxima: refused by name, nothing allocated
# ---------------------------------------------------------------------------


@badinput("unnamed")
def test_a_huge_sysfs_core_count_is_refused_against_the_driver_maximum(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn1.2xlarge", core_metrics=False)
    (tree.device_dir(0) / "core_count").write_text("100000000")
    start = time.monotonic()
    reason = inactive_reason(tree_only(tree))
    assert time.monotonic() - start < 5
    assert "core_count 100000000 is outside 1..8" in reason and "MAX_NC_PER_DEVICE" in reason


@badinput("unnamed")
@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("nc_count", 100000000, "nc_count 100000000 is outside 1..8"),
        ("nc_count", 1e8, "nc_count is 100000000.0, not an integer"),
        ("neuroncore_ids", list(range(100000)), "neuroncore_ids has 100000 entries, more than 8"),
        ("neuron_device", 100000000, "neuron_device 100000000 is outside 0..63"),
        ("connected_to", [5, 100000000], "connected_to[1] 100000000 is outside 0..63"),
    ],
)
def test_huge_neuron_ls_values_are_refused_by_name(
    key: str, value: object, named: str, tmp_path: Path, stub: Path
) -> None:
    data = json.loads((FIXTURES / "trn1.2xlarge.json").read_text())
    data[0][key] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    start = time.monotonic()
    reason = inactive_reason(ls_only(tmp_path, stub, str(bad)))
    assert time.monotonic() - start < 5
    assert named in reason


@badinput("unnamed")
def test_a_huge_neuron_ls_count_is_named_on_a_host_with_dev_nodes(tmp_path: Path, stub: Path) -> None:
    data = json.loads((FIXTURES / "trn1.2xlarge.json").read_text())
    data[0]["nc_count"] = 100000000
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    tree = build_tree(tmp_path / "t", "trn1.2xlarge", core_metrics=False)
    reason = inactive_reason(ls_only(tmp_path, stub, str(bad), RAYACCEL_NEURON_DEV_ROOT=str(tree.dev_root)))
    assert "nc_count 100000000 is outside 1..8" in reason, reason


@badinput("unnamed")
def test_two_sysfs_entries_of_one_device_are_named(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn1.2xlarge", core_metrics=False)
    shutil.copytree(tree.device_dir(0), tree.device_dir(0).with_name("neuron00"), symlinks=True)
    assert "neuron0 and neuron00 both name Neuron device 0" in inactive_reason(tree_only(tree))


@badinput("unnamed")
def test_two_dev_nodes_of_one_device_are_named(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn1.2xlarge", core_metrics=False)
    # A second name for the node (a hard link works for a character device
    # and a plain file alike): /dev/neuron00 beside /dev/neuron0.
    twin = tree.dev_root / "neuron00"
    os.link(tree.dev_node(0), twin)
    with pytest.raises(limits.BadData, match="both name Neuron device 0") as caught:
        sysfs.dev_nodes(str(tree.dev_root))
    assert str(tree.dev_node(0)) in str(caught.value) and str(twin) in str(caught.value)
    reason = inactive_reason(tree_only(tree))
    assert f"{tree.dev_node(0)} and {twin} both name Neuron device 0" in reason, reason


def test_dev_nodes_of_distinct_devices_are_all_listed(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn1.2xlarge", core_metrics=False)
    listed = sysfs.dev_nodes(str(tree.dev_root))
    assert [n.index for n in listed] == list(tree.dev_nodes)
    assert [n.path for n in listed] == [str(tree.dev_node(i)) for i in tree.dev_nodes]


@badinput("unnamed")
def test_a_huge_mock_cores_per_device_is_an_input_error(tmp_path: Path) -> None:
    spec = tmp_path / "big.toml"
    spec.write_text('[host]\nfamily = "neuron"\ndevices = 2\ncores_per_device = 100000000\n')
    proc = run_cli_here("devices", env={"RAYACCEL_MOCK": str(spec)})
    assert proc.returncode == 2
    assert "cores_per_device = 100000000 is above the maximum 8" in proc.stderr


# ---------------------------------------------------------------------------
# neuron-ls timing out: its whole process group is killed
# ---------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@badinput("leftover")
def test_a_hanging_neuron_ls_is_killed_with_its_children(tmp_path: Path, stub: Path) -> None:
    pidfile = tmp_path / "child.pid"
    env = ls_only(tmp_path, stub, STUB_MODE="hang-tree", STUB_PIDFILE=str(pidfile), RAYACCEL_NEURON_LS_TIMEOUT="1.5")
    start = time.monotonic()
    reason = inactive_reason(env)
    assert time.monotonic() - start < 10
    assert "did not answer within 1.5s (its process group was killed)" in reason
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), f"neuron-ls's child {child} survived the timeout"


@badinput("leftover")
@pytest.mark.parametrize("mode", ["hang", "hang-tree"])
@pytest.mark.parametrize(
    ("command", "code"),
    [(["devices"], 0), (["devices", "--json"], 0), (["plan", "--partitions", "2"], 1), (["plan", "--json"], 1)],
    ids=lambda v: " ".join(v) if isinstance(v, list) else str(v),
)
def test_a_hanging_neuron_ls_leaves_nothing_behind_any_command(
    mode: str, command: list[str], code: int, tmp_path: Path, stub: Path
) -> None:
    # Every process below the command inherits the tag, so what is left
    # carrying it was left behind: the stub, or the child it started.
    tag = new_tag()
    pidfile = tmp_path / "child.pid"
    env = ls_only(tmp_path, stub, STUB_MODE=mode, STUB_PIDFILE=str(pidfile), RAYACCEL_NEURON_LS_TIMEOUT="1", **tag)
    proc = run_cli(*command, env=env, timeout=30)
    # Machine data: the backend is inactive (devices exit 0, plan "no active backend" exit 1), never a traceback.
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    said = proc.stdout + proc.stderr
    assert "did not answer within 1s" in said or "no active accelerator backend" in said, said
    deadline = time.monotonic() + 5
    while tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tagged(tag) == {}, f"left behind: {tagged(tag)}"


# ---------------------------------------------------------------------------
# User configuration: exit 2 naming the variable
# ---------------------------------------------------------------------------


@badinput("exit-code")
@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("RAYACCEL_NEURON_LS_TIMEOUT", "abc"),
        ("RAYACCEL_NEURON_LS_TIMEOUT", "nan"),
        ("RAYACCEL_NEURON_LS_TIMEOUT", "-1"),
        ("NEURON_LOGICAL_NC_CONFIG", "3"),
        ("RAYACCEL_NEURON_MONITOR_PERIOD_S", "0"),
    ],
)
@pytest.mark.parametrize("command", [["devices"], ["plan", "--partitions", "2"]])
def test_bad_configuration_exits_2_naming_the_variable(
    variable: str, value: str, command: list[str], tmp_path: Path, stub: Path
) -> None:
    env = ls_only(tmp_path, stub, "trn1.32xlarge.json", **{variable: value})
    proc = run_cli_here(*command, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert variable in proc.stderr and repr(value) in proc.stderr
    as_json = run_cli_here(*command, "--json", env=env)
    assert as_json.returncode == 2
    assert variable in json.loads(as_json.stderr.strip().splitlines()[-1])["error"]


# ---------------------------------------------------------------------------
# Inconsistent machine data makes the backend inactive, exit 0
# ---------------------------------------------------------------------------


@badinput("unnamed")
def test_one_sided_links_in_sysfs_make_the_backend_inactive_not_exit_2(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "inf2.48xlarge", core_metrics=False)
    (tree.device_dir(0) / "connected_devices").write_text("11, 5\n")  # 5 does not list 0
    reason = inactive_reason(tree_only(tree))
    assert "'neuron:0' -> 'neuron:5' is one-sided" in reason


@badinput("unnamed")
@pytest.mark.parametrize(
    ("file", "text", "named"),
    [
        ("core_count", "two", "core_count is 'two', not a count"),
        ("connected_devices", "12, x\n", "connected_devices is '12, x\\n', not a list of device indexes"),
        # A known name of another generation than the PCI ids
        # say contradicts them; a name not known at all does not (test_neuron_unknown.py).
        ("info/architecture/device_name", "Trainium2\n", "device_name says Trainium2, PCI device id says Trainium"),
    ],
)
def test_garbage_in_sysfs_is_named_in_the_reason(file: str, text: str, named: str, tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn1.2xlarge", core_metrics=False)
    (tree.device_dir(0) / file).write_text(text)
    assert named in inactive_reason(tree_only(tree))


@badinput("unnamed")
def test_sysfs_and_neuron_ls_disagreeing_on_cores_is_named(tmp_path: Path, stub: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn2.48xlarge", core_metrics=False)
    data = json.loads((FIXTURES / "trn2.48xlarge.json").read_text())
    data[3]["nc_count"] = 2
    data[3]["neuroncore_ids"] = [12, 13]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    # Two NUMA nodes: neuron-ls runs for the BDFs, and its core count is compared.
    env = {**tree_only(tree), "RAYACCEL_NEURON_LS": str(stub), "STUB_FIXTURE": str(bad)}
    reason = inactive_reason(env)
    assert "neuron:3: sysfs core_count says 8 physical cores, but neuron-ls nc_count 2" in reason


def test_an_inactive_neuron_backend_leaves_others_and_the_cli_going(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn1.2xlarge", core_metrics=False)
    (tree.device_dir(0) / "core_count").write_text("two")
    out = cli_json("devices", env=tree_only(tree))
    assert neuron(out)["active"] is False
    assert {p["name"] for p in out["plugins"]} >= {"neuron", "mock", "cuda"}
