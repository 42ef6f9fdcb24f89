"""Self-check of the Neuron fixtures and the driver-faithful sysfs fake.

Each fixture is checked against its row in tests/fixtures/neuron/CATALOGUE.md,
and the published neuron-ls tables are cross-checked against the topology
tables of the Neuron driver source that the fake encodes: two independent
sources that must agree.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fakes.neuron_sysfs import (
    INF2,
    INSTANCES,
    TRN1,
    TRN2,
    NeuronSysfs,
    build_tree,
    connected_devices_text,
    denied_reads,
    denied_reads_env,
    driver_links,
    full_bdf,
    hide_root_only,
    unprivileged_argv,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "neuron"
CATALOGUE = FIXTURES / "CATALOGUE.md"


def _catalogue() -> list[dict[str, str]]:
    lines = CATALOGUE.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| file | tool |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for ln in lines[start + 2 :]:
        if not ln.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip() for c in ln.strip("|").split("|")), strict=True)))
    return rows


ROWS = _catalogue()
LS_ROWS = [r for r in ROWS if r["tool"] in ("neuron-ls", "neuron-ls-new")]
MON_ROWS = [r for r in ROWS if r["tool"] == "neuron-monitor"]


def _ids(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


def _load(row: dict[str, str]) -> Any:
    return json.loads((FIXTURES / row["file"]).read_text())


def _ls_devices(row: dict[str, str]) -> list[dict[str, Any]]:
    """The device objects of a neuron-ls fixture of either format."""
    data = _load(row)
    if row["tool"] == "neuron-ls":
        assert isinstance(data, list) and data, "neuron-ls --json-output is a top-level array"
        return data
    assert isinstance(data, dict), "neuron-ls --output-format json is an object"
    lists = [v for v in data.values() if isinstance(v, list) and v and all("neuron_device" in e for e in v)]
    assert len(lists) == 1, "one list of devices"
    devices: list[dict[str, Any]] = lists[0]
    return devices


def test_catalogue_lists_every_fixture_and_nothing_else() -> None:
    on_disk = {str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*") if p.is_file() and p != CATALOGUE}
    assert on_disk == {r["file"] for r in ROWS}
    assert {r["origin"] for r in ROWS} <= {"verbatim", "verbatim-values", "constructed", "assumed"}
    assert len(LS_ROWS) >= 16 and len(MON_ROWS) == 2
    # An assumed fixture says so in its name too, wherever it is used.
    assert all(("ASSUMED" in r["file"]) == (r["origin"] == "assumed") for r in ROWS)


@pytest.mark.parametrize("row", LS_ROWS, ids=lambda r: r["file"])
def test_neuron_ls_fixture_matches_its_catalogue_row(row: dict[str, str]) -> None:
    data = _ls_devices(row)
    gen, host_total = INSTANCES[row["host"]]
    if row["tool"] == "neuron-ls-new":
        top = _load(row)
        assert top["instance_type"] == row["itype"]
        lnc = top.get("logical_neuroncore_config", "absent")
        assert lnc == (row["lnc"] if row["lnc"] == "absent" else int(row["lnc"]))
        row = {**row, "itype": "absent"}  # the devices themselves print none
    assert [e["neuron_device"] for e in data] == _ids(row["devices"])
    for e in data:
        i = e["neuron_device"]
        assert isinstance(i, int) and isinstance(e["nc_count"], int)
        assert e["nc_count"] == int(row["cores"])
        assert isinstance(e["memory_size"], int)
        assert e["memory_size"] == (96 if gen is TRN2 else 32) * 1024**3
        assert isinstance(e["bdf"], str) and full_bdf(e["bdf"]).count(":") == 2
        if "numa_node" in e:  # a string, "-1" when the node is unknown
            assert isinstance(e["numa_node"], str) and int(e["numa_node"]) >= -1
        if "cpu_affinity" in e:
            assert isinstance(e["cpu_affinity"], str) and _ids(e["cpu_affinity"])
        if row["lnc"] == "absent":
            assert "logical_neuroncore_config" not in e
        else:
            assert e["logical_neuroncore_config"] == int(row["lnc"])
        if row["itype"] == "absent":
            assert "instance_type" not in e
        else:
            assert e["instance_type"] == row["itype"]
        if row["ids"] == "absent":
            assert "neuroncore_ids" not in e
        else:
            # Global numbering by device index, in logical cores, also in a container view.
            n = e["nc_count"]
            assert e["neuroncore_ids"] == list(range(i * n, i * n + n))
        links = driver_links(gen, host_total, i)
        if row["links"] == "null":
            assert e["connected_to"] is None
        else:
            assert sorted(e["connected_to"]) == sorted(links), "published table disagrees with the driver"
            absent = set(e["connected_to"]) - {d["neuron_device"] for d in data}
            assert bool(absent) == (row["links"] == "host-peers")
        for p in e["neuron_processes"]:
            assert isinstance(p["pid"], int) and isinstance(p["command"], str)
            assert isinstance(p.get("neuron_runtime_version", ""), str)
            assert "memory" not in json.dumps(p), "neuron-ls gives no per-process memory"
    if row["ids"] != "absent":
        assert sorted(c for e in data for c in e["neuroncore_ids"]) == _ids(row["ids"])


def test_links_in_host_fixtures_are_symmetric() -> None:
    for row in LS_ROWS:
        data = _ls_devices(row)
        if row["links"] != "driver":
            continue
        peers = {e["neuron_device"]: set(e["connected_to"]) for e in data}
        for i, ps in peers.items():
            assert all(i in peers[p] for p in ps), (row["file"], i)


def test_verbatim_capture_round_trips_through_the_tool_format() -> None:
    text = (FIXTURES / "neuron-ls" / "trn1.2xlarge.json").read_text()
    assert json.dumps(json.loads(text), indent=4) == text


def test_documented_trn2_devices_are_in_the_excerpt() -> None:
    excerpt = (FIXTURES / "neuron-ls" / "trn2n.48xlarge-doc-excerpt-2.25.txt").read_text()
    trn2 = json.loads((FIXTURES / "neuron-ls" / "trn2.48xlarge.json").read_text())
    for e in (trn2[0], trn2[15]):
        assert f'"bdf": "{e["bdf"]}"' in excerpt
        assert f'"cpu_affinity": "{e["cpu_affinity"]}"' in excerpt


@pytest.mark.parametrize("row", MON_ROWS, ids=lambda r: r["file"])
def test_neuron_monitor_fixture_matches_its_catalogue_row(row: dict[str, str]) -> None:
    report = _load(row)
    hw = report["neuron_hardware_info"]
    assert hw["neuron_device_count"] == int(row["devices"])
    assert hw["neuroncore_per_device_count"] == int(row["cores"])
    assert hw["logical_neuroncore_config"] == int(row["lnc"])
    assert report["instance_info"]["instance_type"] == row["itype"]
    assert isinstance(report["neuron_runtime_data"], list)
    for rt in report["neuron_runtime_data"]:
        counters = rt["report"]["neuroncore_counters"]["neuroncores_in_use"]
        assert all(0 <= c["neuroncore_utilization"] <= 100 for c in counters.values())
        used = rt["report"]["memory_used"]["neuron_runtime_used_bytes"]
        assert isinstance(used["neuron_device"], int) and isinstance(used["host"], int)


# ---------------------------------------------------------------------------
# The driver-faithful sysfs fake
# ---------------------------------------------------------------------------


def test_trn1_tree_follows_the_driver(tmp_path: Path) -> None:
    tree = build_tree(tmp_path, "trn1.32xlarge", core_metrics=False, dmi_product_name="trn1.32xlarge")
    fixture = {e["neuron_device"]: e for e in json.loads((FIXTURES / "neuron-ls" / "trn1.32xlarge.json").read_text())}
    assert sorted(p.name for p in tree.neuron_root.iterdir()) == sorted(f"neuron{i}" for i in range(16))
    for i in range(16):
        d = tree.device_dir(i)
        assert (tree.class_root / f"neuron{i}").resolve() == d.resolve()
        assert not (d / "device").exists() and not (d / "numa_node").exists(), "no PCI parent"
        assert (d / "core_count").read_text() == "2"
        # DOC-PERF's order is the driver's order on trn1.
        assert (d / "connected_devices").read_text() == connected_devices_text(fixture[i]["connected_to"])
        assert stat.S_IMODE((d / "core_count").stat().st_mode) == 0o400
        assert stat.S_IMODE((d / "connected_devices").stat().st_mode) == 0o400
        assert stat.S_IMODE((d / "reset").stat().st_mode) == 0o600
        arch = d / "info" / "architecture"
        assert [(arch / n).read_text() for n in ("arch_type", "instance_type", "device_name")] == [
            "NDv2\n",
            "Trn1\n",
            "Trainium1\n",
        ]
        assert stat.S_IMODE((arch / "device_name").stat().st_mode) == 0o644
        serial = (d / "info" / "serial_number").read_text()
        assert len(serial) == 17 and int(serial, 16) >= 0
        assert sorted(n.name for n in d.glob("neuron_core*")) == ["neuron_core0", "neuron_core1"]
        pci = tree.pci_devices / full_bdf(fixture[i]["bdf"])
        assert (pci / "numa_node").read_text() == f"{fixture[i]['numa_node']}\n"
        assert (pci / "device").read_text() == "0x7164\n"
        assert (pci / "driver").resolve().name == "neuron"
    assert (tree.sys_root / "class" / "dmi" / "id" / "product_name").read_text() == "trn1.32xlarge\n"


@pytest.mark.parametrize(("instance", "gen"), [("inf2.xlarge", INF2), ("trn1.2xlarge", TRN1), ("trn2.3xlarge", TRN2)])
def test_one_device_hosts_differ_only_in_arch_files(tmp_path: Path, instance: str, gen: Any) -> None:
    tree = build_tree(tmp_path, instance, core_metrics=False)
    d = tree.device_dir(0)
    assert (d / "connected_devices").read_text() == "\n"
    assert (d / "core_count").read_text() == str(gen.nc_per_device)
    assert (d / "info" / "architecture" / "device_name").read_text() == f"{gen.device_name}\n"
    assert (d / "info" / "architecture" / "instance_type").read_text() == f"{gen.instance_family}\n"


def test_trn2_counts_physical_cores_and_uses_the_driver_link_order(tmp_path: Path) -> None:
    tree = build_tree(tmp_path, "trn2.48xlarge", core_metrics=False)
    d0 = tree.device_dir(0)
    assert (d0 / "core_count").read_text() == "8"
    assert len(list(d0.glob("neuron_core*"))) == 8
    assert (d0 / "connected_devices").read_text() == "12, 1, 3, 4\n"
    assert (tree.core_dir(0, 7) / "info" / "architecture" / "arch_type").read_text() == "NCv3\n"


def test_metrics_follow_the_driver(tmp_path: Path) -> None:
    tree = build_tree(
        tmp_path,
        "inf2.24xlarge",
        device_mem_used={(3, 1): 5 << 30},
        nc_time_in_use_us={(3, 1): 1234},
        ecc={3: {"mem_ecc_uncorrected": 2}},
    )
    mem = tree.core_dir(3, 1) / "stats" / "memory_usage" / "device_mem"
    assert (mem / "total").read_text() == f"{5 << 30}\n"
    assert (mem / "tensors" / "total").read_text() == f"{5 << 30}\n"
    assert (tree.core_dir(3, 0) / "stats" / "memory_usage" / "device_mem" / "total").read_text() == "0\n"
    assert (tree.core_dir(3, 1) / "stats" / "other_info" / "nc_time_in_use" / "total").read_text() == "1234\n"
    hw = tree.device_dir(3) / "stats" / "hardware"
    assert (hw / "mem_ecc_uncorrected").is_file(), "ECC values are files, not counter directories"
    assert (hw / "mem_ecc_uncorrected").read_text() == "2\n"
    assert not (hw / "mem_ecc_corrected").exists(), "the driver exposes uncorrected ECC only"
    assert stat.S_IMODE((mem / "total").stat().st_mode) == 0o644
    assert (tree.device_dir(0) / "connected_devices").read_text() == "1\n"  # a line, not a ring
    assert (tree.device_dir(5) / "connected_devices").read_text() == "4\n"


def test_container_view_sees_every_sysfs_device_but_only_its_dev_node(tmp_path: Path) -> None:
    tree = build_tree(tmp_path, "trn2.48xlarge", dev_nodes=[5], core_metrics=False)
    assert len(list(tree.neuron_root.glob("neuron*"))) == 16
    assert sorted(p.name for p in tree.dev_root.iterdir()) == ["neuron5"]
    node = tree.dev_node(5)
    assert stat.S_IMODE(node.stat().st_mode) == 0o666
    if tree.dev_node_kind == "char":
        assert stat.S_ISCHR(node.stat().st_mode)
        with pytest.raises(OSError):  # major 0: no driver behind it
            os.close(os.open(node, os.O_RDONLY | os.O_NONBLOCK))
    assert (tree.device_dir(5) / "connected_devices").read_text() == "4, 9, 1, 6\n"
    with pytest.raises(ValueError, match="device 16 is not on a trn2.48xlarge"):
        build_tree(tmp_path / "bad", "trn2.48xlarge", dev_nodes=[16])


def test_root_only_files_can_be_made_unreadable(tmp_path: Path) -> None:
    tree = build_tree(tmp_path, "trn1.32xlarge", core_metrics=False)
    by_modes = hide_root_only(tree)
    cc = tree.device_dir(0) / "core_count"
    name = tree.device_dir(0) / "info" / "architecture" / "device_name"
    assert len(tree.root_only) == 3 * 16
    if by_modes:
        with pytest.raises(PermissionError):
            cc.read_text()
    with denied_reads(tree.root_only):
        with pytest.raises(PermissionError):
            os.open(cc, os.O_RDONLY)
        with pytest.raises(PermissionError):
            cc.read_text()
        assert name.read_text() == "Trainium1\n"
    assert os.geteuid() != 0 or cc.read_text() == "2"  # the patch is gone again


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_unprivileged_reader_is_refused_the_driver_modes() -> None:
    base = Path(tempfile.mkdtemp(prefix="neuron-sysfs-", dir="/tmp"))
    try:
        base.chmod(0o755)
        tree: NeuronSysfs = build_tree(base, "trn1.2xlarge", core_metrics=False)
        denied = subprocess.run(
            unprivileged_argv(["cat", str(tree.device_dir(0) / "core_count")]), capture_output=True, text=True
        )
        allowed = subprocess.run(
            unprivileged_argv(["cat", str(tree.device_dir(0) / "info" / "architecture" / "device_name")]),
            capture_output=True,
            text=True,
        )
        assert denied.returncode != 0 and "Permission denied" in denied.stderr
        assert allowed.returncode == 0 and allowed.stdout == "Trainium1\n"
    finally:
        shutil.rmtree(base)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(INSTANCES)), st.data())
def test_driver_links_are_symmetric_and_on_the_host(instance: str, data: st.DataObject) -> None:
    gen, total = INSTANCES[instance]
    i = data.draw(st.integers(0, total - 1))
    links = driver_links(gen, total, i)
    assert i not in links and len(set(links)) == len(links)
    assert all(0 <= p < total and i in driver_links(gen, total, p) for p in links)
    expected_degree = {1: 0, 4: 0, 6: (1 if i in (0, 5) else 2), 12: 2, 16: 4}[total]
    assert len(links) == expected_degree


@pytest.mark.parametrize("name", ["trn2.48xlarge.json", "container-trn2.48xlarge-device5.json"])
def test_stub_prints_a_fixture_byte_for_byte(name: str) -> None:
    stub = Path(__file__).resolve().parents[1] / "fakes" / "neuron_ls_stub.py"
    env = {**os.environ, "STUB_FIXTURE": name}
    out = subprocess.run([sys.executable, str(stub), "--json-output"], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (FIXTURES / "neuron-ls" / name).read_text()


def test_denied_reads_env_reaches_a_python_subprocess(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "trn1.2xlarge", core_metrics=False)
    env = {**os.environ, **denied_reads_env(tree.root_only, tmp_path / "site")}
    probe = (
        "import sys, pathlib\n"
        "for p in sys.argv[1:]:\n"
        "    try: print(repr(pathlib.Path(p).read_text()))\n"
        "    except PermissionError as e: print('EACCES', e.errno)\n"
    )
    cc = tree.device_dir(0) / "core_count"
    name = tree.device_dir(0) / "info" / "architecture" / "device_name"
    out = subprocess.run([sys.executable, "-c", probe, str(cc), str(name)], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["EACCES 13", repr("Trainium1\n")]
