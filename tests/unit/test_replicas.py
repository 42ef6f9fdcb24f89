"""Ray Serve replicas as workloads, without Ray: a replica told by its
process title, its id found in a frozen actor table (once per new replica
process, never guessed), its fields in a snapshot's JSON, under its
partition in `top --json` and `status --json`, named in `top`'s and
`status`'s tables, and its processes in the partition's workload gauges as
a training worker's are."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from ray_accel_mock import load_spec
from ray_accel_mock.telemetry import MockTelemetry

from ray_accel.cli import render
from ray_accel.cli.connect import FromExporters
from ray_accel.cli.status import with_workloads
from ray_accel.cli.top import top_payload
from ray_accel.core.processes import process_table
from ray_accel.metrics.collect import (
    ProcessReading,
    Snapshot,
    Where,
    WorkloadReading,
    collect,
    with_replicas,
)
from ray_accel.metrics.export import gauge_values
from ray_accel.metrics.replicas import (
    NOT_LOOKED_UP,
    RETRY_FIRST_S,
    RETRY_MAX_S,
    ReplicaIds,
    ServeReplica,
    from_title,
    identify,
    replica_fields,
)
from ray_accel.rayapi.serve import LiveActor
from tests.status_nodes import raylet_row, running_host_status

NODE = "aa" * 28
OTHER_NODE = "bb" * 28
TITLE = "ray::ServeReplica:where:Where"
NO_ACTOR = "Ray's actor table has no live actor with this PID on this raylet"


def actor(pid: int, name: str, node_id: str = NODE) -> LiveActor:
    return LiveActor(name=name, class_name="ServeReplica:where:Where", pid=pid, node_id=node_id)


# ---------------------------------------------------------------- what a title says, what the table says


def test_a_replicas_title_names_its_app_and_deployment_but_not_its_id() -> None:
    assert from_title(TITLE) == ServeReplica(
        app="where", deployment="Where", replica_id=None, unknown={"replica_id": NOT_LOOKED_UP}
    )
    assert from_title(f"{TITLE} --some-arg") == from_title(TITLE), "the title's first word"
    assert from_title("ray::TrainWorker.train") is None and from_title("ray::IDLE") is None


def test_a_title_that_does_not_split_into_app_and_deployment_says_so() -> None:
    """Ray may add the running method to an actor's title; a name with `:` or
    `.` is then ambiguous: unknown, never guessed."""
    for title in ("ray::ServeReplica:where:Where.handle_request", "ray::ServeReplica:a:b:c", "ray::ServeReplica:x"):
        seen = from_title(title)
        assert seen is not None and (seen.app, seen.deployment, seen.replica_id) == (None, None, None), title
        assert set(seen.unknown) == {"app", "deployment", "replica_id"}
        assert "does not split into app and deployment" in seen.unknown["app"]


def test_the_actor_table_names_each_replica_by_its_pid_on_this_raylet() -> None:
    seen = from_title(TITLE)
    assert seen is not None
    pending = {10: seen, 11: seen, 12: seen, 13: seen}
    actors = [
        actor(10, "SERVE_REPLICA::where#Where#abc123"),
        actor(11, "SERVE_REPLICA::where#Where#zzz999", OTHER_NODE),  # PID 11 of another host
        actor(12, "my-own-actor"),
        actor(0, "SERVE_REPLICA::where#Where#nopid"),  # no PID in the table yet
        actor(13, "SERVE_REPLICA::Where#noapp1"),  # a replica without an app, as Serve names it
    ]
    got = identify(pending, actors, NODE)
    assert got[10] == ServeReplica(app="where", deployment="Where", replica_id="abc123")
    assert got[11] == ServeReplica(app="where", deployment="Where", replica_id=None, unknown={"replica_id": NO_ACTOR})
    assert got[12].replica_id is None
    assert got[12].unknown == {"replica_id": "its actor's name 'my-own-actor' is not a Serve replica's"}
    assert got[13] == ServeReplica(app="", deployment="Where", replica_id="noapp1")


# ---------------------------------------------------------------- the exporter's lookups


class Table:
    """A frozen actor table, counting its reads; `broken` makes a read raise."""

    def __init__(self, *actors: LiveActor) -> None:
        self.actors = list(actors)
        self.reads = 0
        self.broken: Exception | None = None

    def __call__(self) -> list[LiveActor]:
        self.reads += 1
        if self.broken is not None:
            raise self.broken
        return list(self.actors)


def titled(*pids: int) -> dict[int, ServeReplica]:
    seen = from_title(TITLE)
    assert seen is not None
    return dict.fromkeys(pids, seen)


def test_the_table_is_read_once_per_new_replica_process_not_per_sample() -> None:
    table = Table(actor(10, "SERVE_REPLICA::where#Where#a"), actor(11, "SERVE_REPLICA::where#Where#b"))
    ids = ReplicaIds(NODE, table)
    assert ids.identify({}, 0.0) == ({}, []) and table.reads == 0, "no replica, no read"
    found, errors = ids.identify(titled(10), 1.0)
    assert found[10].replica_id == "a" and errors == [] and table.reads == 1
    for t in range(2, 50):
        assert ids.identify(titled(10), float(t))[0][10].replica_id == "a"
    assert table.reads == 1, "a known replica is not looked up again"
    assert ids.identify(titled(10, 11), 50.0)[0][11].replica_id == "b" and table.reads == 2
    # A PID that ended is forgotten: a new process with that PID is looked up afresh.
    ids.identify(titled(11), 51.0)
    table.actors = [actor(10, "SERVE_REPLICA::where#Where#c"), actor(11, "SERVE_REPLICA::where#Where#b")]
    assert ids.identify(titled(10, 11), 52.0)[0][10].replica_id == "c" and table.reads == 3


def test_a_replica_not_in_the_table_is_listed_unknown_and_looked_up_less_and_less_often() -> None:
    table = Table()
    ids = ReplicaIds(NODE, table)
    found, errors = ids.identify(titled(10), 0.0)
    assert found == {
        10: ServeReplica(app="where", deployment="Where", replica_id=None, unknown={"replica_id": NO_ACTOR})
    }
    assert errors == [], "a replica not found yet is no failure of a source"
    reads, now, waits = [], 0.0, []
    while now < 400:
        now += 1.0
        before = table.reads
        assert ids.identify(titled(10), now)[0][10].unknown == {"replica_id": NO_ACTOR}
        if table.reads > before:
            reads.append(now)
    waits = [b - a for a, b in zip([0.0, *reads], reads, strict=False)]
    assert waits[:4] == [RETRY_FIRST_S, 2 * RETRY_FIRST_S, 4 * RETRY_FIRST_S, 8 * RETRY_FIRST_S]
    assert max(waits) == RETRY_MAX_S
    table.actors = [actor(10, "SERVE_REPLICA::where#Where#late")]
    now += RETRY_MAX_S
    assert ids.identify(titled(10), now)[0][10].replica_id == "late", "found once it is in the table"


def test_a_table_that_cannot_be_read_is_an_error_and_each_replica_says_why(caplog: pytest.LogCaptureFixture) -> None:
    table = Table()
    table.broken = ConnectionError("GCS gone")
    ids = ReplicaIds(NODE, table)
    why = "Ray's actor table could not be read: ConnectionError: GCS gone"
    with caplog.at_level(logging.WARNING, logger="ray_accel.metrics.replicas"):
        for now in (0.0, RETRY_FIRST_S, 3 * RETRY_FIRST_S):
            found, errors = ids.identify(titled(10), now)
            assert found[10].unknown == {"replica_id": why} and found[10].app == "where"
            assert errors == [f"serve replica ids unknown: {why}"]
    assert table.reads == 3
    assert [r.getMessage() for r in caplog.records] == [f"ray-accel metrics: serve replica ids unknown: {why}"], (
        "logged when it starts failing, not at every read"
    )


# ---------------------------------------------------------------- collection, JSON, top and status


def test_collect_tells_a_replica_by_its_title_and_the_exporter_names_it(tmp_path: Path) -> None:
    """A worker of this process (as raylet) titled as Ray titles a replica
    (its comm cut at 15 characters, so its title is read from `cmdline`):
    collected with its title's app and deployment, then named by the table."""
    script = "printf ray::ServeReplica > /proc/$$/comm; sleep 60 & wait"
    worker = subprocess.Popen([TITLE, "-c", script], executable="/bin/sh", start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{worker.pid}/comm").read_text().startswith("ray::ServeRepli"):
            assert time.monotonic() < deadline, "the worker never retitled itself"
            time.sleep(0.01)
        telemetry = MockTelemetry(load_spec("trn1.2xlarge"))
        at = Where("hostA", NODE, "p0")
        snap = collect(telemetry, telemetry.spec.devices, None, os.getpid(), (), process_table(), at)
    finally:
        worker.kill()
        worker.wait()
    (w,) = [w for w in snap.workloads if w.pid == worker.pid]
    assert w.workload == f"{TITLE}[{worker.pid}]" and w.serve == from_title(TITLE)
    ids = ReplicaIds(NODE, Table(actor(worker.pid, "SERVE_REPLICA::where#Where#r1")))
    found, errors = ids.identify({w.pid: w.serve for w in snap.workloads if w.serve is not None}, 0.0)
    named = with_replicas(snap, found, errors)
    (entry,) = [e for e in named.to_json()["workloads"] if e["pid"] == worker.pid]  # type: ignore[union-attr]
    assert {k: entry[k] for k in ("kind", "app", "deployment", "replica_id", "pid", "partition", "unknown")} == {
        "kind": "serve_replica",
        "app": "where",
        "deployment": "Where",
        "replica_id": "r1",
        "pid": worker.pid,
        "partition": "p0",
        "unknown": {},
    }
    assert entry["pids"][0] == worker.pid and entry["workload"] == w.workload


def reading(pid: int, title: str, partition: str, serve: ServeReplica | None) -> WorkloadReading:
    """A worker of two processes, each with 1 MiB of RSS, 2 CPU-seconds and 64 MiB on `neuron:0`."""
    procs = tuple(
        ProcessReading(
            pid=p, name=title[:15], cpu_seconds=2.0, rss_bytes=2**20, device_memory_bytes={"neuron:0": 2**26}
        )
        for p in (pid, pid + 1)
    )
    return WorkloadReading(f"{title}[{pid}]", "hostA", partition, pid, procs, serve)


def snapshot(node_id: str, partition: str, *workloads: WorkloadReading) -> Snapshot:
    return Snapshot(
        host="hostA",
        node_id=node_id,
        partition=partition,
        taken_at=0.0,
        took_s=0.001,
        devices=(),
        workloads=workloads,
        orphans=(),
        errors=(),
    )


REPLICA = ServeReplica(app="where", deployment="Where", replica_id="r1")
UNNAMED = ServeReplica(app="where", deployment="Where", replica_id=None, unknown={"replica_id": NO_ACTOR})


def test_a_replicas_processes_are_in_its_partitions_gauges_as_a_training_workers() -> None:
    snap = snapshot("a0", "p1", reading(100, "ray::TrainWorker.train", "p1", None), reading(200, TITLE, "p1", REPLICA))
    values = gauge_values(snap, None, None)
    by_workload: dict[str, dict[str, tuple[float, dict[str, str]]]] = {}
    for key, value, tags in values:
        by_workload.setdefault(tags["workload"], {})[key] = (value, tags)
    train, replica = by_workload["ray::TrainWorker.train[100]"], by_workload[f"{TITLE}[200]"]
    assert set(train) == set(replica) == {"w_rss", "w_cpu", "w_dev"}
    for key in ("w_rss", "w_cpu", "w_dev"):
        assert replica[key][0] == train[key][0], "the whole tree, summed alike"
        assert set(replica[key][1]) == set(train[key][1]), "the same tags"
        assert (replica[key][1]["host"], replica[key][1]["partition"]) == ("hostA", "p1")
    assert replica["w_rss"][0] == 2 * 2**20 and replica["w_dev"][1]["device_id"] == "neuron:0"


def test_top_json_lists_each_partitions_replicas_under_it_and_its_table_names_them() -> None:
    snaps: dict[str, dict[str, Any] | str] = {
        "a0": snapshot("a0", "p0", reading(100, "ray::TrainWorker.train", "p0", None)).to_json(),
        "a1": snapshot("a1", "p1", reading(200, TITLE, "p1", REPLICA), reading(300, TITLE, "p1", UNNAMED)).to_json(),
        "a2": "no metrics exporter: gone",
    }
    parts = [
        raylet_row("p0", "hostA", "10.0.0.1", "a0", True),
        raylet_row("p1", "hostA", "10.0.0.1", "a1", True),
        raylet_row("p2", "hostA", "10.0.0.1", "a2", True),
    ]
    payload = top_payload(parts, snaps)
    rows = {p["partition"]: p["workloads"] for p in payload["partitions"]}
    assert [w["pid"] for w in rows["p0"]] == [100] and rows["p2"] == [], "no snapshot: no workloads"
    assert [w for ws in rows.values() for w in ws] == payload["workloads"], "the top-level list is kept, the same"
    (train,) = rows["p0"]
    assert {k: train[k] for k in ("kind", "app", "deployment", "replica_id", "unknown")} == {
        "kind": "ray_worker",
        "app": None,
        "deployment": None,
        "replica_id": None,
        "unknown": {},
    }
    named, unnamed = rows["p1"]
    fields = ("kind", "app", "deployment", "replica_id", "pid", "unknown")
    assert {k: named[k] for k in fields} == {
        "kind": "serve_replica",
        "app": "where",
        "deployment": "Where",
        "replica_id": "r1",
        "pid": 200,
        "unknown": {},
    }
    assert (unnamed["replica_id"], unnamed["unknown"]) == (None, {"replica_id": NO_ACTOR}), "listed, unknown said"
    # Every field a workload had before is still there.
    assert {"workload", "host", "partition", "pid", "pids", "cpu_seconds", "rss_bytes", "device_memory_bytes"} <= set(
        named
    )
    text = render.top_text(payload)
    line = next(line for line in text.splitlines() if line.startswith(f"{TITLE}[200]"))
    assert "p1" in line and "where/Where r1" in line
    assert "where/Where ?" in next(line for line in text.splitlines() if line.startswith(f"{TITLE}[300]"))
    assert "SERVE REPLICA" in text


def test_an_older_exporters_workloads_still_show() -> None:
    """A workload written before replicas were named (no `kind`) is a plain worker to `top`."""
    old = snapshot("a0", "p0", reading(100, TITLE, "p0", None)).to_json()
    for w in old["workloads"]:  # type: ignore[union-attr]
        for k in ("kind", "app", "deployment", "replica_id", "unknown"):
            del w[k]
    payload = top_payload([raylet_row("p0", "hostA", "10.0.0.1", "a0", True)], {"a0": old})
    assert render.replica_text(payload["partitions"][0]["workloads"][0]) is None
    assert TITLE in render.top_text(payload)


def test_status_lists_each_partitions_workloads_replicas_named() -> None:
    base = running_host_status()
    workloads = (
        *snapshot("a0", "p0", reading(100, "ray::TrainWorker.train", "p0", None)).to_json()["workloads"],  # type: ignore[misc]
        *snapshot("a1", "p1", reading(200, TITLE, "p1", REPLICA), reading(300, TITLE, "p1", UNNAMED)).to_json()[
            "workloads"
        ],  # type: ignore[misc]
    )
    text = render.status_with_exporters_text(base, FromExporters((), (), workloads))
    assert "SERVE REPLICA" in text and "orphans: none" in text
    line = next(line for line in text.splitlines() if f"{TITLE}[200]" in line and line.startswith("p1"))
    assert "200" in line and "where/Where r1" in line
    assert f"p1 {TITLE}[300]: replica_id unknown: {NO_ACTOR}" in text
    assert "workloads: none" in render.status_with_exporters_text(base, FromExporters(()))
    assert "workloads: none" not in render.status_with_exporters_text(base, FromExporters((), ("p0: gone",)))
    # --json: each partition's own workloads under it, all of them at the top as before.
    shown = with_workloads(
        {"partitions": [{"partition": "p0"}, {"partition": "p1"}, {"partition": "p2"}], "workloads": list(workloads)}
    )
    assert [[w["pid"] for w in p["workloads"]] for p in shown["partitions"]] == [[100], [200, 300], []]
    assert shown["workloads"] == list(workloads)


def test_a_plain_workers_json_says_it_is_no_replica() -> None:
    assert replica_fields(None) == {
        "kind": "ray_worker",
        "app": None,
        "deployment": None,
        "replica_id": None,
        "unknown": {},
    }
    assert replica_fields(UNNAMED)["unknown"] == {"replica_id": NO_ACTOR}
