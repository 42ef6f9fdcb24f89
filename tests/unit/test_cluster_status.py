"""`status --cluster`: the view built from the GCS node table, and "no cluster".
A host is its name and node IP: two hosts of one name are two hosts."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_accel.cli import render
from ray_accel.cluster import statedir
from ray_accel.cluster import status as status_mod
from ray_accel.cluster.status import (
    ClusterView,
    DeciderStatus,
    HealthSummary,
    HostStatus,
    PartitionStatus,
    cluster_status,
    cluster_view,
)
from ray_accel.core.errors import RayAccelError
from ray_accel.core.health import DeviceHealth, Health, HealthEvent
from ray_accel.core.health_state import OnUnhealthy, PartitionState, PartState
from ray_accel.core.hosts import host_key, ip_text
from ray_accel.core.reader import dump
from ray_accel.core.visibility import parse_visible_ids
from ray_accel.partition.plan import (
    HOST_LABEL,
    MaskView,
)
from tests.badinput import badinput
from tests.cli_process import CliRunner
from tests.clirun import run_cli_here
from tests.status_nodes import NODES, node

HA, HB = "ha_10.0.0.1", "hb_10.0.0.2"


def test_view_lists_partition_raylets_of_every_host() -> None:
    view = dump(cluster_view("10.0.0.1:6379", NODES))
    assert [(p["host"], p["partition"], p["node_id"], p["alive"]) for p in view["partitions"]] == [
        (HA, "p0", "n1", True),
        (HA, "p1", "n2", True),
        (HB, "p0", "n3", False),
        (HB, "p1", "n4", True),
    ]
    assert view["hosts"] == [
        {"host": HA, "name": "ha", "ips": ["10.0.0.1"], "partitions": 2, "alive": 2},
        {"host": HB, "name": "hb", "ips": ["10.0.0.2"], "partitions": 2, "alive": 1},
    ]
    assert view["other_nodes"] == 1 and view["warnings"] == [] and view["replaced_dead"] == 0
    p1 = view["partitions"][1]
    assert p1["core_ids"] == list(range(16, 32)) and p1["mask"] == "16-31"
    assert p1["device_indexes"] == list(range(8)) and p1["accelerator_type"] == "Trainium"
    assert p1["total"] == {"CPU": 1.0, "memory": 1e9, "neuron_cores": 16.0}  # no node:<ip> markers
    assert p1["available"]["neuron_cores"] == 12.0
    json.dumps(view)  # what --json prints


def test_dead_predecessor_of_a_live_partition_is_not_listed() -> None:
    # host B joined again: its old p0 raylet stays dead in the GCS, a new one serves p0
    nodes = {**NODES, "n5": node("hb", "p0", "10.0.0.2")}
    view = dump(cluster_view("10.0.0.1:6379", nodes))
    assert [(p["host"], p["partition"], p["node_id"]) for p in view["partitions"]] == [
        (HA, "p0", "n1"),
        (HA, "p1", "n2"),
        (HB, "p0", "n5"),
        (HB, "p1", "n4"),
    ]
    assert all(p["alive"] for p in view["partitions"]) and view["replaced_dead"] == 1
    assert view["hosts"][1] == {"host": HB, "name": "hb", "ips": ["10.0.0.2"], "partitions": 2, "alive": 2}


def test_two_hosts_of_one_name_are_two_hosts() -> None:
    nodes = {
        f"{ip[-1]}{p}": node("ubuntu", p, ip, cores=cores)
        for ip in ("10.0.0.1", "10.0.0.2")
        for p, cores in (("p0", "0-15"), ("p1", "16-31"))
    }
    view = dump(cluster_view("10.0.0.1:6379", nodes))
    assert [(h["host"], h["name"], h["ips"], h["partitions"]) for h in view["hosts"]] == [
        ("ubuntu_10.0.0.1", "ubuntu", ["10.0.0.1"], 2),
        ("ubuntu_10.0.0.2", "ubuntu", ["10.0.0.2"], 2),
    ]
    assert len(view["partitions"]) == 4 and all(p["host_name"] == "ubuntu" for p in view["partitions"])
    # the host column is the host label's value: what a selector names
    assert all(p["host"] == nodes[p["node_id"]].labels[HOST_LABEL] for p in view["partitions"])
    assert (
        render.cluster_status_text(cluster_view("10.0.0.1:6379", nodes)).splitlines()[0]
        == "cluster 10.0.0.1:6379: 4 partitions on 2 hosts"
    )
    # host B's old raylet, dead after it joined again, is not host A's
    nodes["2p0-old"] = node("ubuntu", "p0", "10.0.0.2", alive=False)
    again = dump(cluster_view("10.0.0.1:6379", nodes))
    assert again["replaced_dead"] == 1 and [p["node_id"] for p in again["partitions"]] == ["1p0", "1p1", "2p0", "2p1"]


def test_a_raylet_without_the_host_label_is_keyed_by_what_ray_records() -> None:
    view = dump(cluster_view("a:1", {"n9": node("old", "p0", "10.0.0.9", label=False)}))
    assert view["partitions"][0]["host"] == "old_10.0.0.9"


def test_view_reports_bad_labels() -> None:
    bad = node(None, "p0", "10.0.0.9", cores="3-1")
    view = dump(cluster_view("a:1", {"n9": bad}))
    (p,) = view["partitions"]
    assert p["host"] == "name-of-10.0.0.9_10.0.0.9" and p["core_ids"] is None and p["mask"] is None
    assert len(view["warnings"]) == 1 and "'3-1'" in view["warnings"][0] and "n9" in view["warnings"][0]


def test_text_table_counts_partitions_and_hosts() -> None:
    text = render.cluster_status_text(cluster_view("10.0.0.1:6379", NODES))
    lines = text.splitlines()
    assert lines[0] == "cluster 10.0.0.1:6379: 4 partitions on 2 hosts (1 dead)"
    assert sum(" DEAD " in line for line in lines) == 1
    assert "neuron_cores 12/16, CPU 0/1" in text
    assert "other nodes (no partition label): 1" in text


labels_st = st.dictionaries(
    st.text("abcdefgh0123456789-", min_size=1, max_size=6),
    st.tuples(st.sampled_from(["ha", "hb", "hc", None]), st.sampled_from(["p0", "p1", None]), st.booleans()),
    max_size=12,
)


@given(labels_st)
def test_view_counts_every_labelled_node_once(spec: dict[str, tuple[str | None, str | None, bool]]) -> None:
    nodes = {nid: node(h, p, "10.0.0.1", alive) for nid, (h, p, alive) in spec.items()}
    view = dump(cluster_view("a:1", nodes))
    labelled = [nid for nid, (_, p, _) in spec.items() if p is not None]
    shown = [p["node_id"] for p in view["partitions"]]
    assert len(shown) + view["replaced_dead"] == len(labelled) and set(shown) <= set(labelled)
    assert {nid for nid in labelled if spec[nid][2]} <= set(shown)  # every live raylet is listed
    # a dead one is listed exactly when no live raylet has its host and partition
    slots = {(p["host"], p["partition"]) for p in view["partitions"] if p["alive"]}
    assert all(p["alive"] or (p["host"], p["partition"]) not in slots for p in view["partitions"])
    assert view["other_nodes"] == len(spec) - len(labelled)
    assert sum(h["partitions"] for h in view["hosts"]) == len(shown)
    assert sum(h["alive"] for h in view["hosts"]) == sum(p["alive"] for p in view["partitions"])
    keys = [(p["host"], p["partition"], not p["alive"], p["node_id"]) for p in view["partitions"]]
    assert keys == sorted(keys)


def test_no_record_is_no_cluster_exit_1(cli: CliRunner, tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    text = cli("status", "--cluster", env=env)
    assert text.returncode == 1 and "no cluster" in text.stderr
    proc = cli("status", "--cluster", "--json", env=env)
    assert proc.returncode == 1 and proc.stdout == ""
    err = json.loads(proc.stderr)
    assert err["exit_code"] == 1 and err["kind"] == "failure" and "no cluster" in err["error"]
    assert not (tmp_path / ".ray-accel").exists()  # read-only: nothing made


def test_gcs_not_answering_is_no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    record = SimpleNamespace(gcs_address="10.0.0.1:6379", auth=None)
    place = statedir.Place(Path("/s"), Path("/s/host.json"), True)
    monkeypatch.setattr(statedir, "locate", lambda: statedir.Found(place))
    monkeypatch.setattr(statedir, "load", lambda where: record)
    monkeypatch.setattr(status_mod, "gcs_nodes", lambda *a: None)
    monkeypatch.setattr(status_mod.auth, "apply", lambda a: None)
    with pytest.raises(RayAccelError, match=r"no cluster: the GCS at 10\.0\.0\.1:6379 .* did not answer within 2s"):
        cluster_status(2.0)


raylets_st = st.dictionaries(
    st.text("abcdef0123456789", min_size=1, max_size=6),
    st.tuples(
        st.sampled_from(["ubuntu", "localhost", "h-a"]),
        st.sampled_from(["10.0.0.1", "10.0.0.2", "fd00::1"]),
        st.sampled_from(["p0", "p1"]),
        st.booleans(),
    ),
    max_size=12,
)


@given(raylets_st)
def test_a_host_is_its_name_and_ip_never_the_name_alone(spec: dict[str, tuple[str, str, str, bool]]) -> None:
    nodes = {nid: node(name, part, ip, alive) for nid, (name, ip, part, alive) in spec.items()}
    view = dump(cluster_view("a:1", nodes))
    shown = {(spec[p["node_id"]][0], spec[p["node_id"]][1]) for p in view["partitions"]}
    assert len(view["hosts"]) == len(shown), "one host per name and IP"
    for h in view["hosts"]:
        assert len(h["ips"]) == 1 and h["host"] == host_key(h["name"], h["ips"][0])
    for p in view["partitions"]:
        name, ip, part, _ = spec[p["node_id"]]
        assert (p["host"], p["host_name"], p["ip"], p["partition"]) == (host_key(name, ip), name, ip, part)


@given(st.sampled_from(["neuron", "dev", "acme"]), st.sets(st.integers(0, 300), min_size=1, max_size=20))
def test_ids_of_one_prefix_and_numbers_read_as_ranges_of_any_family(prefix: str, numbers: set[int]) -> None:
    ids = [f"{prefix}:{n}" for n in sorted(numbers)]
    text = render.format_id_list(ids)
    head, _, ranges = text.partition(":")
    assert head == prefix and parse_visible_ids(ranges) == sorted(numbers)


@given(st.lists(st.text(max_size=12), min_size=1, max_size=6))
def test_other_ids_are_listed_as_they_are(ids: list[str]) -> None:
    text = render.format_id_list(ids)
    prefixes = {i.partition(":")[0] for i in ids}
    compact = len(prefixes) == 1 and all(
        ":" in i and i.partition(":")[2].isascii() and i.partition(":")[2].isdigit() for i in ids
    )
    assert compact or text == ",".join(ids)


@badinput("exit-code")
@pytest.mark.parametrize("per_ip", [False, True], ids=["RAYACCEL_STATE_DIR", "per-IP folder"])
def test_status_of_a_state_folder_it_may_not_read_names_it(
    per_ip: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    folder = statedir.home_root() / ip_text("10.0.0.1") if per_ip else tmp_path / "state"
    folder.mkdir(parents=True)
    folder.chmod(0o000)  # what a user sees; root reads it anyway, so the refusal is made here too
    real = os.lstat

    def lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if Path(path).parent == folder:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", lstat)
    monkeypatch.setattr(statedir, "local_addresses", lambda: ["10.0.0.1"])
    env = {"HOME": str(tmp_path / "home")} if per_ip else {"RAYACCEL_STATE_DIR": str(folder)}
    try:
        proc = run_cli_here("status", env=env)
    finally:
        folder.chmod(0o700)
    assert proc.returncode == 2, proc
    assert f"cannot read state directory {folder}: permission denied" in proc.stderr
    assert "No ray-accel partitions" not in proc.stdout + proc.stderr


def test_a_bad_label_on_many_raylets_is_reported_for_each() -> None:
    # Label texts are decoded once per view: each raylet carrying a bad one still gets its warning.
    nodes = {"n8": node("ha", "p0", "10.0.0.8", cores="3-1"), "n9": node("hb", "p0", "10.0.0.9", cores="3-1")}
    view = dump(cluster_view("a:1", nodes))
    assert [p["core_ids"] for p in view["partitions"]] == [None, None]
    assert len(view["warnings"]) == 2 and "(n8)" in view["warnings"][0] and "(n9)" in view["warnings"][1]


def test_partitions_sharing_a_label_get_their_own_lists() -> None:
    view = cluster_view("a:1", {"n1": node("ha", "p0", "10.0.0.1"), "n2": node("hb", "p0", "10.0.0.2")})
    first, second = view.partitions
    assert first.core_ids == second.core_ids and first.core_ids is not second.core_ids
    assert first.mask == second.mask == "0-15"


# `status` as text for a host whose record has everything `status` can
# show: the inherited mask, the dashboard, a decider that is not running, a
# partition drained and a device out; what `start` prints after; and an empty
# cluster view.
def partition(name: str, health: PartitionState | None, head: bool = False) -> PartitionStatus:
    return PartitionStatus(
        partition=name,
        device_ids=("mock:0",),
        core_ids=(0, 1),
        visible_ids="0,1",
        out=(),
        health=health,
        accelerator_type="Trainium",
        models=("Trainium",),
        pid=4242,
        node_id="ab" * 16,
        head=head,
        alive=True,
        registered=True,
        in_use={"neuron_cores": 1.0},
        total={"neuron_cores": 2.0},
        worker_ports=(20000, 20099),
        problems=(),
        share=None,
        cpu_set=(0, 1, 2),
        log=None,
    )


DRAINING = PartitionState(PartState.DRAINING, 5.0, "mock:1 failed; restarts without it by 65")


EVENT = HealthEvent("mock:1", "xid", "79", "XID 79 (GPU has fallen off the bus)", 4.0, True)


SUMMARY = HealthSummary(
    action=OnUnhealthy.SHRINK,
    interval_s=5.0,
    drain_deadline_s=60.0,
    decider=DeciderStatus(None, False),
    at=5.0,
    polls=3,
    not_healthy=(DeviceHealth("mock:1", Health.UNHEALTHY, 4.0, EVENT, "cleared by hand"),),
    errors=(),
)


STATUS = HostStatus(
    running=True,
    host="hostA",
    host_ip="10.0.0.1",
    state_file="/state/host.json",
    state_dir="/state",
    gcs_address="10.0.0.1:6379",
    gcs_alive=True,
    dashboard_address="10.0.0.1:8265",
    cpu_pinning="by NUMA node",
    inherited_mask=MaskView("NEURON_RT_VISIBLE_CORES", "0-3", (0, 1, 2, 3), (), "mask 0-3"),
    env={"RAY_ADDRESS": "10.0.0.1:6379"},
    warnings=("a warning",),
    partitions=(partition("p0", None), partition("p1", DRAINING)),
    health=SUMMARY,
    head=partition("head", None, True),
)


def test_status_text_shows_the_host_the_mask_the_dashboard_and_what_is_not_healthy() -> None:
    lines = render.status_text(STATUS).splitlines()
    assert lines[2].split()[:2] == ["p0", "alive"] and lines[3].split()[:3] == ["p1", "alive", "draining"]
    assert lines[4:] == [
        "CPU pinning: by NUMA node",
        "head: alive, raylet pid 4242, node abababababab",
        "host: hostA, node IP 10.0.0.1",
        "mask 0-3",
        "dashboard: 10.0.0.1:8265",
        "health decider: NOT RUNNING (ray-accel start --recover starts it), --on-unhealthy shrink",
        "  p1 draining: mock:1 failed; restarts without it by 65",
        "  mock:1 unhealthy: XID 79 (GPU has fallen off the bus)",
        "warning: a warning",
    ]
    assert (
        render.health_lines(
            HostStatus(
                running=True,
                host="h",
                host_ip=None,
                state_file=None,
                state_dir="/",
                gcs_address=None,
                gcs_alive=False,
                dashboard_address=None,
            )
        )
        == []
    )


def test_after_start_a_user_is_told_how_to_submit_connect_and_target() -> None:
    text = render.started_text(STATUS)
    assert text.startswith(render.status_text(STATUS))
    assert "submit a job: ray job submit --address 10.0.0.1:8265 -- python script.py" in text
    assert "driver environment: export RAY_ADDRESS=10.0.0.1:6379" in text
    assert "ray.init(address='10.0.0.1:6379')" in text and "label_selector=" in text


def test_a_cluster_without_partitions_is_one_line_and_its_warnings() -> None:
    view = ClusterView("10.0.0.1:6379", (), (), 1, 0, ("node n9 has a bad label",))
    assert render.cluster_status_text(view) == (
        "cluster 10.0.0.1:6379: 0 partitions on 0 hosts\nwarning: node n9 has a bad label"
    )
