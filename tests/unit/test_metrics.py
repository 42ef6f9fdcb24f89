"""The metrics layer without Ray: collection (failures reported, never raised), orphans from a
real process tree, the gauges and tags an exporter sets, and `top`'s view of every host."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray_accel_mock import load_spec
from ray_accel_mock.telemetry import MockTelemetry

from ray_accel.cli import render
from ray_accel.cli.connect import FromExporters
from ray_accel.cli.top import DEVICE_FIELDS, head_of, top_payload
from ray_accel.cluster.status import ClusterPartition, cluster_view
from ray_accel.core import masks
from ray_accel.core.devices import Device
from ray_accel.core.health import DeviceHealth, Health
from ray_accel.core.health_state import HealthSettings, HostHealth, PartitionHealth, PartState
from ray_accel.core.hosts import host_key
from ray_accel.core.processes import ProcessRecord, children_map, descendants, process_table, snapshot
from ray_accel.core.samples import DeviceSample
from ray_accel.jobs.store import HEAD_RESOURCE
from ray_accel.metrics.collect import (
    OrphanReading,
    Snapshot,
    Where,
    collect,
    device_readings,
    orphan_pids,
    workload_readings,
)
from ray_accel.metrics.export import (
    COMMAND_MAX,
    GAUGES,
    HostValues,
    actor_name,
    gauge_values,
    partition_health,
)
from ray_accel.partition.plan import CORES_LABEL, PARTITION_LABEL
from ray_accel.rayapi.gcs import GcsNode
from tests.dashboard_queries import METRICS
from tests.exporter_worker import as_exporter_worker
from tests.status_nodes import raylet_row, running_host_status


class Flaky(MockTelemetry):
    def __init__(self, mode: str) -> None:
        super().__init__(load_spec("p5.48xlarge"))
        self.mode = mode

    def device_samples(self) -> list[DeviceSample]:
        if self.mode == "raise":
            raise OSError("NVML went away")
        samples = super().device_samples()
        return samples[1:] if self.mode == "lose-first" else samples


def _devices(telemetry: MockTelemetry) -> tuple[Device, ...]:
    return telemetry.spec.devices


def test_readings_cover_exactly_the_partition() -> None:
    telemetry = MockTelemetry(load_spec("p5.48xlarge"))
    mine = _devices(telemetry)[:4]
    readings, errors = device_readings(telemetry, mine, "p0", "H100")
    assert [r.id for r in readings] == [d.id for d in mine]
    assert all(r.partition == "p0" and r.recent_events == 0 and r.reason is None for r in readings) and errors == []


def test_a_failing_source_marks_every_device_unknown() -> None:
    plugin = Flaky("raise")
    readings, errors = device_readings(plugin, _devices(plugin), "p0", "H100")
    assert all(
        r.recent_events is None and "metric source failed: OSError: NVML went away" == r.reason for r in readings
    )
    assert errors == ["metric source failed: OSError: NVML went away"]


def test_a_vanished_device_is_reported_and_the_rest_collected() -> None:
    plugin = Flaky("lose-first")
    devices = _devices(plugin)
    readings, errors = device_readings(plugin, devices, "p0", "H100")
    assert readings[0].utilization is None and readings[0].reason == "device disappeared"
    assert all(r.utilization is not None and r.reason is None for r in readings[1:])
    assert errors == [f"device {devices[0].id} disappeared"]


def test_workloads_cover_the_process_tree() -> None:
    code = "import subprocess,time; subprocess.Popen(['sleep','30']); time.sleep(30)"
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        root = psutil.Process(parent.pid)
        for _ in range(100):
            if root.children():
                break
            time.sleep(0.05)
        telemetry = MockTelemetry(load_spec("trn1.32xlarge"))
        mine = {d.id for d in _devices(telemetry)}
        (w,), _ = workload_readings(telemetry, {parent.pid: "python"}, process_table(), mine, Where("h", "n", "p1"))
        assert w.pid == parent.pid and len(w.processes) == 2 and w.partition == "p1"
        assert w.rss_bytes > 0 and w.workload.endswith(f"[{parent.pid}]")
        table = snapshot()
        assert set(descendants(parent.pid, children_map(table.values()))) == {
            c.pid for c in root.children(recursive=True)
        }, "one pass over /proc finds what psutil's recursive walk finds"
    finally:
        for c in psutil.Process(parent.pid).children(recursive=True):
            c.kill()
        parent.kill()
        parent.wait()


def test_a_workload_that_ends_before_collection_is_skipped() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    proc.kill()
    proc.wait()
    telemetry = MockTelemetry(load_spec("trn1.2xlarge"))
    titles = {proc.pid: "sleep", os.getpid(): "python"}
    readings, _ = workload_readings(telemetry, titles, process_table(), set(), Where("h", "n", "p0"))
    assert [w.pid for w in readings] == [os.getpid()], "the ended one is skipped, the other still read"


def test_process_device_memory_is_on_the_partitions_own_devices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAYACCEL_MASK_DIR", str(tmp_path))
    telemetry = MockTelemetry(load_spec("trn1.32xlarge"))
    masks.publish("0,1,2")  # this process holds cores 0-2: neuron:0 (2 cores) and neuron:1 (1 core)
    me = {os.getpid(): "python"}
    (mine,), _ = workload_readings(telemetry, me, process_table(), {"neuron:0"}, Where("h", "n", "p0"))
    assert mine.device_memory_bytes == {"neuron:0": 2 * 64 * 1024**2}, "only the partition's own device"
    (other,), _ = workload_readings(telemetry, me, process_table(), {"neuron:1", "neuron:2"}, Where("h", "n", "p1"))
    assert other.device_memory_bytes == {"neuron:1": 64 * 1024**2}


# ---------------------------------------------------------------- export: names, tags, values


def _snapshot(telemetry: MockTelemetry, devices: tuple[Device, ...], host: str = "hostA") -> Snapshot:
    readings, errors = device_readings(telemetry, devices, "p0", None, host)
    return Snapshot(
        host=host,
        node_id="node-a",
        partition="p0",
        taken_at=0.0,
        took_s=0.0,
        devices=tuple(readings),
        workloads=(),
        orphans=(),
        errors=tuple(errors),
    )


def _verdicts(states: Mapping[str, Health]) -> HostHealth:
    """The host's decider's file with these device verdicts."""
    devices = tuple(DeviceHealth(d, s, 0.0, None, "" if s is Health.HEALTHY else "x") for d, s in states.items())
    return HostHealth(at=0.0, settings=HealthSettings(), devices=devices, partitions=())


def _by_key(values: list[tuple[str, float, dict[str, str]]]) -> dict[str, list[tuple[float, dict[str, str]]]]:
    out: dict[str, list[tuple[float, dict[str, str]]]] = {}
    for key, value, tags in values:
        out.setdefault(key, []).append((value, tags))
    return out


def test_gauges_are_served_with_rays_prefix_under_the_dashboards_names() -> None:
    """Ray's recorder serves `accel_x` as `ray_accel_x`; what Prometheus sees is what the dashboard queries."""
    served = {}
    for spec in GAUGES.values():
        assert spec.name.startswith("accel_") and not spec.name.startswith("ray_"), spec.name
        served["ray_" + spec.name] = frozenset(spec.tags)
    assert {name: METRICS[name] for name in served} == served, "names and tags as the dashboard expects"
    assert set(METRICS) - set(served) <= {"ray_accel_job_phase"}, "every dashboard metric but job phases exported here"


def test_every_device_once_with_host_partition_power_and_temperature() -> None:
    telemetry = MockTelemetry(load_spec("p5.48xlarge"))
    devices = _devices(telemetry)[:4]
    samples = {s.device_id: s for s in telemetry.device_samples()}
    verdicts = _verdicts(dict.fromkeys((d.id for d in devices), Health.HEALTHY))
    keys = _by_key(gauge_values(_snapshot(telemetry, devices), None, verdicts))
    for key in ("util", "used", "total", "healthy", "power", "temp"):
        ids = [tags["device_id"] for _, tags in keys[key]]
        assert ids == [d.id for d in devices], f"{key}: each device of the partition exactly once"
        assert all(tags["host"] == "hostA" and tags["partition"] == "p0" for _, tags in keys[key])
        assert all(set(tags) == set(GAUGES[key].tags) for _, tags in keys[key])
    assert [v for v, _ in keys["power"]] == [samples[d.id].power_watts for d in devices]
    assert [v for v, _ in keys["temp"]] == [samples[d.id].temperature_c for d in devices]
    assert [v for v, _ in keys["healthy"]] == [1.0] * 4
    assert "n_devices" not in keys and "orphan" not in keys


class NoPowerNoHealth(MockTelemetry):
    """A backend without power, temperature or health sources (the Neuron
    backend has no power or temperature: backends/neuron/ray_accel_neuron/telemetry.py)."""

    def device_samples(self) -> list[DeviceSample]:
        return [s._replace(power_watts=None, temperature_c=None, recent_events=None) for s in super().device_samples()]


def test_values_a_backend_lacks_set_no_gauge() -> None:
    telemetry = NoPowerNoHealth(load_spec("trn1.32xlarge"))
    keys = _by_key(gauge_values(_snapshot(telemetry, _devices(telemetry)[:2]), None, None))
    assert {"util", "used", "total"} <= set(keys)
    assert not {"power", "temp", "healthy"} & set(keys), "None is no value, not 0"


def test_the_healthy_gauge_is_the_rules_verdict_and_unknown_is_no_value() -> None:
    failing = Flaky("raise")
    devices = _devices(failing)
    states = [Health.HEALTHY, Health.UNHEALTHY, Health.UNKNOWN]
    verdicts = _verdicts({d.id: s for d, s in zip(devices, states, strict=False)})
    keys = _by_key(gauge_values(_snapshot(failing, devices), None, verdicts))
    assert [(tags["device_id"], v) for v, tags in keys["healthy"]] == [(devices[0].id, 1.0), (devices[1].id, 0.0)], (
        "the rule's verdict, whatever the samples read; unknown (or no verdict) is no value, never 0"
    )
    assert [(v, tags["device_id"]) for v, tags in keys["total"]] == [(float(d.memory_bytes), d.id) for d in devices]
    assert "healthy" not in _by_key(gauge_values(_snapshot(failing, devices), None, None)), "no decider: unknown"


def test_host_values_come_only_from_the_exporter_that_owns_them() -> None:
    telemetry = MockTelemetry(load_spec("trn1.32xlarge"))
    snap = _snapshot(telemetry, _devices(telemetry)[:8])
    host = HostValues("hostA", "neuron", "Trainium", 16, 123)
    keys = _by_key(gauge_values(snap, host, None))
    assert keys["n_devices"] == [(16.0, {"host": "hostA", "family": "neuron", "accelerator_type": "Trainium"})]
    assert keys["n_mem"] == [(123.0, {"host": "hostA", "family": "neuron", "accelerator_type": "Trainium"})]
    assert not {"n_devices", "n_mem"} & set(_by_key(gauge_values(snap, None, None)))


def test_orphan_gauge_names_pid_and_a_bounded_command() -> None:
    orphan = OrphanReading("neuron:1", "hostA", "p0", 4242, "python " + "x" * 500)
    snap = Snapshot(
        host="hostA",
        node_id="node-a",
        partition="p0",
        taken_at=0.0,
        took_s=0.0,
        devices=(),
        workloads=(),
        orphans=(orphan,),
        errors=(),
    )
    ((key, value, tags),) = gauge_values(snap, None, None)
    assert (key, value) == ("orphan", 1.0)
    assert tags == {
        "host": "hostA",
        "partition": "p0",
        "device_id": "neuron:1",
        "pid": "4242",
        "command": orphan.command[:COMMAND_MAX],
    }
    assert len(tags["command"]) == COMMAND_MAX


def test_exporters_are_named_by_node_id_not_partition() -> None:
    assert actor_name("abc123") == "exporter-abc123"
    assert actor_name("abc123") != actor_name("def456")


def _gcs_node(node_id: str, host: str, part: str | None, alive: bool, ip: str = "10.0.0.1") -> GcsNode:
    """One row of the GCS's node table."""
    return GcsNode(node_id=node_id, alive=alive, labels={PARTITION_LABEL: part} if part else {}, ip=ip, hostname=host)


def partition_nodes(nodes: list[GcsNode]) -> tuple[ClusterPartition, ...]:
    """The partition raylets `top` shows of `nodes`."""
    return cluster_view("a:1", {n.node_id: n for n in nodes}).partitions


def test_partition_nodes_keeps_every_hosts_partitions_and_drops_replaced_dead_ones() -> None:
    nodes = [
        _gcs_node("b0", "hostB", "p0", True, "10.0.0.2"),
        _gcs_node("a0-old", "hostA", "p0", False),  # replaced by a0 (recovered)
        _gcs_node("a0", "hostA", "p0", True),
        _gcs_node("a1", "hostA", "p1", False),  # dead, nothing replaced it: shown dead
        _gcs_node("plain", "hostA", None, True),  # not a partition raylet
    ]
    got = [(p.host, p.partition, p.node_id, p.alive) for p in partition_nodes(nodes)]
    assert got == [
        ("hostA_10.0.0.1", "p0", "a0", True),
        ("hostA_10.0.0.1", "p1", "a1", False),
        ("hostB_10.0.0.2", "p0", "b0", True),
    ]


def test_dead_partitions_whose_units_a_live_one_serves_are_dropped() -> None:
    def node(node_id: str, part: str, cores: str, alive: bool) -> GcsNode:
        return replace(_gcs_node(node_id, "hostA", part, alive), labels={PARTITION_LABEL: part, CORES_LABEL: cores})

    # c and d merged into cd by a repartition; e removed, its units given to no one.
    nodes = [node("c", "c", "16-23", False), node("d", "d", "24-31", False), node("cd", "cd", "16-31", True)]
    nodes.append(node("e", "e", "32-39", False))
    assert [(p.partition, p.alive) for p in partition_nodes(nodes)] == [("cd", True), ("e", False)]


def test_two_hosts_of_one_name_keep_their_own_partitions() -> None:
    nodes = [
        _gcs_node("a0", "ubuntu", "p0", True, "10.0.0.1"),
        _gcs_node("b0", "ubuntu", "p0", True, "10.0.0.2"),
        _gcs_node("b0-old", "ubuntu", "p0", False, "10.0.0.2"),  # B's before it joined again
        _gcs_node("c0", "ubuntu", "p0", False, "10.0.0.3"),  # C stopped: nothing replaced it
    ]
    got = [(p.host, p.node_id, p.alive) for p in partition_nodes(nodes)]
    assert got == [("ubuntu_10.0.0.1", "a0", True), ("ubuntu_10.0.0.2", "b0", True), ("ubuntu_10.0.0.3", "c0", False)]


# ---------------------------------------------------------------- orphans from a real process tree

RAYLET = r"""
import subprocess, sys
# Titled as Ray titles a worker (setproctitle sets argv and the kernel's comm).
w = subprocess.Popen(["ray::IDLE", "-c", "printf ray::IDLE > /proc/$$/comm; sleep 600 & wait"], executable="/bin/sh")
print(w.pid, flush=True)
sys.stdin.read()
"""


def _publish(pid: int, mask: str) -> None:
    """The record `masks.publish` writes in the process itself: mask and kernel start time."""
    record = ProcessRecord.of(pid)
    assert record is not None
    Path(masks.mask_dir(), str(pid)).write_text(f"{mask}\n{record.start_ticks}\n")


def _wait_children(pid: int, n: int) -> list[int]:
    for _ in range(200):
        kids = psutil.Process(pid).children()
        if len(kids) >= n:
            return [k.pid for k in kids]
        time.sleep(0.05)
    raise AssertionError(f"process {pid} has no {n} children")


def test_collect_names_holders_outside_the_raylets_tree_as_orphans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(masks.MASK_DIR_ENV, str(tmp_path))
    telemetry = MockTelemetry(load_spec("trn1.32xlarge"))
    mine = _devices(telemetry)[:8]  # p0: neuron:0-7, cores 0-15
    raylet = subprocess.Popen(
        [sys.executable, "-c", RAYLET], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    outsiders = [subprocess.Popen(["sleep", "600"]) for _ in range(2)]
    try:
        assert raylet.stdout is not None
        worker = int(raylet.stdout.readline())
        (grandchild,) = _wait_children(worker, 1)
        _publish(worker, "0,1")  # neuron:0, a worker: not an orphan
        _publish(grandchild, "3")  # neuron:1, inside the worker's tree: not an orphan
        _publish(outsiders[0].pid, "2")  # neuron:1, outside the tree: an orphan of p0
        _publish(outsiders[1].pid, "20")  # neuron:10, another partition's device: not p0's
        snap = collect(telemetry, mine, "trn1", raylet.pid, (), process_table(), Where("hostA", "node-a", "p0"))
        assert [(o.device_id, o.pid, o.partition, o.host) for o in snap.orphans] == [
            ("neuron:1", outsiders[0].pid, "p0", "hostA")
        ]
        assert snap.orphans[0].command == "sleep 600"
        (w,) = snap.workloads
        assert w.pid == worker and {p.pid for p in w.processes} == {worker, grandchild}
        assert w.workload == f"ray::IDLE[{worker}]" and w.host == "hostA"
        assert w.device_memory_bytes == {"neuron:0": 2 * 64 * 1024**2, "neuron:1": 64 * 1024**2}
        as_json = snap.to_json()
        assert as_json["orphans"] == [
            {
                "device_id": "neuron:1",
                "host": "hostA",
                "partition": "p0",
                "pid": outsiders[0].pid,
                "command": "sleep 600",
            }
        ]
        orphan_tags = [tags for key, _, tags in gauge_values(snap, None, None) if key == "orphan"]
        assert [(t["pid"], t["command"]) for t in orphan_tags] == [(str(outsiders[0].pid), "sleep 600")]
        assert orphan_pids({"neuron:1": (1, 2), "neuron:9": (3,)}, {"neuron:1"}, {2}) == [("neuron:1", 1)]
    finally:
        for p in outsiders:
            p.kill()
            p.wait()
        os.killpg(raylet.pid, signal.SIGKILL)
        raylet.wait()


def test_a_record_whose_pid_is_now_another_processs_thread_holds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once PIDs wrap, a dead writer's number may go to a thread of another
    process; pidfd_open then fails with ENOENT (Linux 6.9 and later). That
    record holds nothing, and the holders and memory of the others are still
    read: before, the error failed both sources for the whole partition."""
    monkeypatch.setenv(masks.MASK_DIR_ENV, str(tmp_path))
    telemetry = MockTelemetry(load_spec("trn1.32xlarge"))
    started, done = threading.Event(), threading.Event()
    tids: list[int] = []

    def thread() -> None:
        tids.append(threading.get_native_id())
        started.set()
        done.wait(60)

    worker = threading.Thread(target=thread)
    worker.start()
    outsider = subprocess.Popen(["sleep", "600"])
    try:
        started.wait(10)
        (tid,) = tids
        Path(tmp_path, str(tid)).write_text("0,1\n12345\n")  # neuron:0, by a writer long gone
        _publish(outsider.pid, "2")  # neuron:1, a live writer
        assert telemetry.device_holders() == {"neuron:1": (outsider.pid,)}
        assert telemetry.process_device_memory([tid, outsider.pid]) == {outsider.pid: {"neuron:1": 64 * 1024**2}}
    finally:
        done.set()
        worker.join()
        outsider.kill()
        outsider.wait()


class BrokenHolders(MockTelemetry):
    def device_holders(self) -> dict[str, tuple[int, ...]]:
        raise OSError("neuron-ls timed out")


class BrokenMemory(MockTelemetry):
    def process_device_memory(self, pids: Collection[int]) -> Mapping[int, Mapping[str, int]]:
        raise RuntimeError("neuron-monitor exited")


def test_a_failing_holder_source_is_an_error_not_a_crash() -> None:
    telemetry = BrokenHolders(load_spec("trn1.2xlarge"))
    snap = collect(telemetry, _devices(telemetry), None, os.getpid(), (), process_table(), Where("hostA", "", "p0"))
    assert snap.orphans == () and snap.errors == ("device holders unknown: OSError: neuron-ls timed out",)


def test_a_failing_process_memory_source_reaches_the_errors_and_the_log(caplog: pytest.LogCaptureFixture) -> None:
    """Not swallowed: the workloads are still read (without device memory),
    the reason is in the snapshot's errors with its cause, and logged once
    when the source starts failing."""
    telemetry = BrokenMemory(load_spec("trn1.2xlarge"))
    # A Ray worker of this process, titled as Ray titles them (in the kernel's comm too).
    script = "printf ray::IDLE > /proc/$$/comm; sleep 60 & wait"
    worker = subprocess.Popen(["ray::IDLE", "-c", script], executable="/bin/sh", start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{worker.pid}/comm").read_text().strip() != "ray::IDLE":
            assert time.monotonic() < deadline, "the worker never retitled itself"
            time.sleep(0.01)
        with caplog.at_level(logging.WARNING, logger="ray_accel.metrics.collect"):
            at = Where("hostA", "", "p-broken")
            titles = {worker.pid: "ray::IDLE"}
            readings, errors = workload_readings(telemetry, titles, process_table(), {"neuron:0"}, at)
            assert [w.pid for w in readings] == [worker.pid] and readings[0].device_memory_bytes == {}
            assert errors == ["process device memory unknown: RuntimeError: neuron-monitor exited"]
            snaps = [collect(telemetry, _devices(telemetry), None, os.getpid(), (), process_table(), at) for _ in "ab"]
    finally:
        worker.kill()
        worker.wait()
    for snap in snaps:
        assert "process device memory unknown: RuntimeError: neuron-monitor exited" in snap.errors
    logged = [r.getMessage() for r in caplog.records if "neuron-monitor exited" in r.getMessage()]
    assert logged == [
        "ray-accel metrics of partition p-broken: process device memory unknown: RuntimeError: neuron-monitor exited"
    ]


# ---------------------------------------------------------------- top: every host, orphans rendered


def test_top_payload_joins_every_hosts_snapshots_and_names_missing_ones() -> None:
    telemetry = MockTelemetry(load_spec("trn1.32xlarge"))
    devices = _devices(telemetry)
    orphan = OrphanReading("neuron:1", "hostA", "p0", 4242, "python hog.py")
    a = Snapshot(
        host="hostA",
        node_id="a0",
        partition="p0",
        taken_at=0.0,
        took_s=0.002,
        devices=tuple(device_readings(telemetry, devices[:8], "p0", None, "hostA")[0]),
        workloads=(),
        orphans=(orphan,),
        errors=(),
    )
    b = Snapshot(
        host="hostB",
        node_id="b0",
        partition="p0",
        taken_at=0.0,
        took_s=0.003,
        devices=tuple(device_readings(telemetry, devices[8:], "p0", None, "hostB")[0]),
        workloads=(),
        orphans=(),
        errors=("x",),
    )
    parts = [
        raylet_row("p0", "hostA", "10.0.0.1", "a0", True),
        raylet_row("p0", "hostB", "10.0.0.2", "b0", True),
        raylet_row("p1", "hostB", "10.0.0.2", "b1", True),
        raylet_row("p1", "hostA", "10.0.0.1", "a1", False),
    ]
    payload = top_payload(parts, {"a0": a.to_json(), "b0": b.to_json(), "b1": "no metrics exporter: gone"})
    assert [(d["host"], d["id"]) for d in payload["devices"]] == [("hostA", d.id) for d in devices[:8]] + [
        ("hostB", d.id) for d in devices[8:]
    ]
    # The device's health by its family's rule comes from the host's decider
    # (health.json); these hosts have none.
    assert all(set(DEVICE_FIELDS) | {"healthy", "health_state"} == set(d) for d in payload["devices"])
    assert all(d["health_state"] is None and d["healthy"] is None for d in payload["devices"])
    assert payload["orphans"] == [orphan]
    assert payload["errors"] == ["hostB/p0: x", "hostB/p1: no metrics exporter: gone"], "a dead raylet is no error"
    assert [p["exporter"] for p in payload["partitions"]] == ["ok", "ok", "no metrics exporter: gone", "raylet is dead"]
    text = render.top_text(payload)
    assert "ORPHAN PID" in text and "4242" in text and "python hog.py" in text
    assert "DEAD" in text and "error: hostB/p1: no metrics exporter: gone" in text
    # The head raylet, apart from the partitions: the live node with Ray's head marker.
    nodes = [
        GcsNode(node_id="ab" * 28, alive=False),
        GcsNode(node_id="cd" * 28, alive=True, total={HEAD_RESOURCE: 1.0}, ip="10.0.0.1"),
    ]
    payload["head"] = head_of(nodes)
    assert payload["head"] == {"node_id": "cd" * 28, "ip": "10.0.0.1"} and head_of(nodes[:1]) is None
    assert render.top_text(payload).startswith("head raylet: node cdcdcdcdcdcd on 10.0.0.1\n\n")


def test_top_shows_a_drained_and_a_stopped_partition_from_the_host_level_exporter() -> None:
    """A drained partition's exporter leaves it, a stopped one has none: the
    host-level exporter's snapshot carries their state and the drained one's
    devices, so every partition shows its state and the bad device its verdict."""
    telemetry = MockTelemetry(load_spec("trn1.32xlarge"))
    devices = _devices(telemetry)
    p0, p1, p2 = (tuple(d.id for d in devices[i : i + 4]) for i in (0, 4, 8))
    bad = p1[0]
    health = HostHealth(
        at=1.0,
        settings=HealthSettings(),
        devices=tuple(
            DeviceHealth(d, Health.UNHEALTHY if d == bad else Health.HEALTHY, 1.0, None, "") for d in p0 + p1
        ),
        partitions=(
            PartitionHealth(
                partition="p0", state=PartState.SERVING, since=1.0, devices=p0, out=(), node_id="a0", detail=""
            ),
            PartitionHealth(
                partition="p1",
                state=PartState.DRAINING,
                since=2.0,
                devices=p1,
                out=(bad,),
                node_id="a1",
                detail=f"drained to stop: {bad}: gone",
                deadline=9.0,
                target=(),
            ),
            PartitionHealth(
                partition="p2",
                state=PartState.STOPPED,
                since=3.0,
                devices=(),
                out=p2,
                node_id=None,
                detail="stopped: its devices are out of service",
            ),
        ),
    )
    mine, _ = device_readings(telemetry, devices[:4], "p0", None, "hostA")
    adopted, _ = device_readings(telemetry, devices[4:8], "p1", None, "hostA")
    snap = Snapshot(
        host="hostA",
        node_id="a0",
        partition="p0",
        taken_at=0.0,
        took_s=0.002,
        devices=tuple(mine),
        workloads=(),
        orphans=(),
        errors=(),
    )
    host_level = {
        **snap.to_json(),
        "health": partition_health(health, "p0"),
        "others": {p: partition_health(health, p) for p in ("p1", "p2")},
        "devices": [d._asdict() for d in (*mine, *adopted)],
    }
    parts = [
        raylet_row("p0", "hostA", "10.0.0.1", "a0", True),
        raylet_row("p1", "hostA", "10.0.0.1", "a1", True),
        raylet_row("p2", "hostA", "10.0.0.1", "a2", False),
    ]
    payload = top_payload(parts, {"a0": host_level})
    rows = payload["partitions"]
    assert [(r["health"]["state"], r["exporter"]) for r in rows] == [
        ("serving", "ok"),
        ("draining", "left (draining)"),
        ("stopped", "left (stopped)"),
    ]
    assert rows[0]["device_ids"] == list(p0) and rows[1]["health"]["out"] == [bad]
    assert payload["errors"] == [], "an exporter that left a drained partition is no error"
    shown = {d["id"]: (d["partition"], d["health_state"]) for d in payload["devices"]}
    assert shown == {d: ("p0", "healthy") for d in p0} | {d: ("p1", "unhealthy" if d == bad else "healthy") for d in p1}
    text = render.top_text(payload)
    assert [line.split()[3] for line in text.splitlines() if line.split()[:1] in (["p0"], ["p1"], ["p2"])] == [
        "serving",
        "draining",
        "stopped",
    ]


def test_status_text_shows_orphans_or_says_why_not() -> None:
    base = running_host_status()
    hog = OrphanReading("neuron:1", "hostA", "p0", 7, "hog")
    text = render.status_with_exporters_text(base, FromExporters((hog,)))
    assert "ORPHAN PID" in text and "hog" in text
    assert "orphans: none" in render.status_with_exporters_text(base, FromExporters(()))
    assert "orphans unknown: p0: gone" in render.status_with_exporters_text(base, FromExporters((), ("p0: gone",)))


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["ubuntu", "h-a"]),
            st.sampled_from(["10.0.0.1", "10.0.0.2"]),
            st.sampled_from(["p0", "p1"]),
            st.booleans(),
        ),
        max_size=10,
    )
)
def test_top_keys_raylets_by_host_name_and_ip(rows: list[tuple[str, str, str, bool]]) -> None:
    nodes = [_gcs_node(f"n{i}", name, part, alive, ip) for i, (name, ip, part, alive) in enumerate(rows)]
    got = partition_nodes(nodes)
    by_id = {f"n{i}": row for i, row in enumerate(rows)}
    live = {(host_key(n, ip), p) for n, ip, p, alive in rows if alive}
    assert {p.node_id for p in got} == {
        f"n{i}" for i, (n, ip, p, alive) in enumerate(rows) if alive or (host_key(n, ip), p) not in live
    }, "every live raylet; a dead one only where no live one serves its host and partition"
    for p in got:
        name, ip, part, _ = by_id[p.node_id]
        assert (p.host, p.ip, p.partition) == (host_key(name, ip), ip, part)


# ---------------------------------------------------------------- the exporter's backend


def test_an_exporter_runs_no_discovery_and_probes_only_its_spec_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exporter's backend is the one its raylet's bridge spec names,
    loaded by name: discovery never runs (it would probe every installed
    backend), and the only probe is that backend's own, to find the hardware
    it samples."""
    from ray_accel_mock import MockPlugin

    from ray_accel.cluster.helpers import read_inputs
    from ray_accel.core.reader import dump
    from ray_accel.hostops.driver_ops import MODULE, DriverOp
    from ray_accel.metrics.export import Deployment, ExporterEntry, PartitionExporter
    from ray_accel.plugins import discovery

    discoveries: list[object] = []
    probes: list[str] = []
    monkeypatch.setattr(discovery, "discover_plugins", lambda *a, **k: discoveries.append(a) or [])
    monkeypatch.setattr(discovery, "_activate", lambda *a: discoveries.append(a))
    monkeypatch.setattr(MockPlugin, "probe", lambda self: probes.append(self.name))
    monkeypatch.setenv("RAYACCEL_MOCK", "trn1.2xlarge")
    monkeypatch.setenv(discovery.SPEC_ENV, '[{"backend": "mock"}]')
    as_exporter_worker(monkeypatch, "node-a")
    discovery.process_backend.cache_clear()
    try:
        entry = ExporterEntry("p0", "node-a", ("neuron:0",))
        op = DriverOp("exporters", "10.0.0.1:6379", Deployment("10.0.0.1:6379", (entry,), "p0"))
        assert read_inputs(DriverOp, [json.dumps(dump(op))], MODULE) == op, "as the decider hands it on"
        exporter = PartitionExporter(entry, True, 3600.0, None)
        assert discoveries == [] and probes == ["mock"]
        assert discovery.process_backend() is exporter.plugin, "found once per process"
        snap = exporter.snapshot()
        assert [d["id"] for d in snap["devices"]] == ["neuron:0"] and snap["partition"] == "p0"
    finally:
        discovery.process_backend.cache_clear()


def test_a_failed_sample_is_in_the_snapshot_until_one_succeeds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sample that raises leaves the last snapshot standing, so it says so
    (never an older view shown as current), and the next sample reads `/proc`
    with a new table; a snapshot left standing by a sample that hangs says
    how old it is."""

    from ray_accel.core.processes import ProcessTable
    from ray_accel.metrics.export import ExporterEntry, PartitionExporter
    from ray_accel.plugins import discovery

    monkeypatch.setenv("RAYACCEL_MOCK", "trn1.2xlarge")
    monkeypatch.setenv(discovery.SPEC_ENV, '[{"backend": "mock"}]')
    as_exporter_worker(monkeypatch, "node-a")
    discovery.process_backend.cache_clear()
    try:
        exporter = PartitionExporter(ExporterEntry("p0", "node-a", ("neuron:0",)), True, 3600.0, None)
    finally:
        discovery.process_backend.cache_clear()
    first = exporter.snapshot()

    class Broken(ProcessTable):
        def read(self, root: int | None = None) -> ProcessTable:
            raise KeyError(root)

    exporter.table = Broken()
    exporter.resample()
    failed = exporter.snapshot()
    assert failed["taken_at"] == first["taken_at"], "the last good sample still stands"
    assert failed["errors"][-1].startswith(f"sample failed: KeyError: {os.getppid()}"), failed["errors"]
    assert type(exporter.table) is ProcessTable, "the next sample reads with a new table"
    exporter.resample()
    again = exporter.snapshot()
    assert again["taken_at"] > first["taken_at"] and not any("sample failed" in e for e in again["errors"])
    # A sample that hangs raises nothing: a snapshot three intervals old says it is one.
    monkeypatch.setattr(time, "time", lambda: again["taken_at"] + 3 * 3600.0 + 1)
    (stale,) = [e for e in exporter.snapshot()["errors"] if e.startswith("no sample for")]
    assert stale == "no sample for 10801s: this snapshot is from the last one"


def test_a_bad_spec_or_entry_is_an_input_error(capsys: pytest.CaptureFixture[str]) -> None:
    from ray_accel.cluster.helpers import read_inputs
    from ray_accel.core.errors import InputError
    from ray_accel.hostops.driver_ops import MODULE, DriverOp
    from ray_accel.plugins.discovery import spec_backend

    assert spec_backend(None) is None and spec_backend('[{"backend": "cuda"}]') == "cuda"
    for bad in ("{", "[{}]", '[{"backend": 3}]'):
        with pytest.raises(InputError, match="bad RAYACCEL_BRIDGE_SPEC"):
            spec_backend(bad)
    op = '{"op": "exporters", "address": "a:1", "deploy": {"address": "a:1", "entries": [%s]}}'
    for bad, named in (
        ("{", "inputs is not valid JSON"),
        (op % '{"partition": "p0", "node_id": "n"}', r"inputs\.deploy\.entries\[0\]\.device_ids: missing"),
        (op % '{"partition": "p0", "node_id": 1, "device_ids": []}', r"inputs\.deploy\.entries\[0\]\.node_id"),
        ('{"op": "scale", "address": "a:1"}', r"inputs\.op: 'scale' is not one of exporters, leave"),
    ):
        with pytest.raises(SystemExit, match="2"):
            read_inputs(DriverOp, [bad], MODULE)
        assert re.search(named, capsys.readouterr().err), named


def test_a_drained_partitions_exporter_leaves_and_its_devices_move_to_the_host_level_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """By `health.json`: a worker raylet the decider drains loses its
    exporter (a live actor keeps a drained raylet from ending); the
    host-level values, the health gauges and the drained raylet's device
    series come from the first partition whose exporter runs; a drained head
    keeps its exporter (it is held, never ends); a restarted partition's new
    raylet is not the drained one."""

    from ray_accel.core.health_state import HealthSettings, HostHealth, PartitionHealth, PartState, dumps
    from ray_accel.metrics.export import ExporterEntry, PartitionExporter, adopted, host_level_of, leaves
    from ray_accel.plugins import discovery

    monkeypatch.setenv("RAYACCEL_MOCK", "trn1.32xlarge")
    monkeypatch.setenv(discovery.SPEC_ENV, '[{"backend": "mock"}]')
    as_exporter_worker(monkeypatch, "node-b")
    p0 = tuple(f"neuron:{i}" for i in range(8))
    p1 = tuple(f"neuron:{i}" for i in range(8, 16))

    def host(p0_state: PartState, p1_state: PartState, p1_node: str = "node-a") -> HostHealth:
        parts = (
            PartitionHealth(partition="p0", state=p0_state, since=1.0, devices=p0, out=(), node_id="node-0", detail=""),
            PartitionHealth(
                partition="p1", state=p1_state, since=1.0, devices=p1, out=("neuron:11",), node_id=p1_node, detail=""
            ),
        )
        return HostHealth(at=1.0, settings=HealthSettings(), devices=(), partitions=parts)

    draining = host(PartState.SERVING, PartState.DRAINING)
    assert leaves(draining, "node-a") and not leaves(draining, "node-0") and not leaves(None, "node-a")
    assert host_level_of(draining) == "p0" and adopted(draining) == {"p1": p1}
    restarted = host(PartState.SERVING, PartState.SHRUNK, "node-c")
    assert not leaves(host(PartState.SERVING, PartState.DRAINING, "node-old"), "node-c") and adopted(restarted) == {}
    # The first partition (no longer the head) drains like any: its exporter leaves.
    first_drained = host(PartState.DRAINING, PartState.SERVING)
    assert leaves(first_drained, "node-0") and host_level_of(first_drained) == "p1"
    assert host_level_of(host(PartState.STOPPED, PartState.DRAINING)) is None

    # p0 drains: p1's exporter, started without the host-level values, takes them and p0's devices.
    (tmp_path / "health.json").write_text(dumps(host(PartState.DRAINING, PartState.SERVING, "node-b")))
    discovery.process_backend.cache_clear()
    try:
        exporter = PartitionExporter(ExporterEntry("p1", "node-b", p1), False, 3600.0, str(tmp_path))
    finally:
        discovery.process_backend.cache_clear()
    util = exporter.g["util"].values
    assert sorted(tags["device_id"] for _, tags in util) == sorted((*p0, *p1))
    assert {tags["partition"] for _, tags in util if tags["device_id"] in p0} == {"p0"}
    assert exporter.g["n_devices"].values and exporter.g["p_state"].values
    assert not leaves(exporter._health[0], "node-b")
