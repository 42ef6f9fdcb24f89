"""Connecting to the recorded cluster and asking this host's exporters for
orphans, with Ray's side stood in for: what is refused, what is called in
which order, and how a failure to ask is reported."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import ray

from ray_accel.cli.connect import FromExporters, connect_to_recorded_cluster, from_exporters
from ray_accel.core.errors import RayAccelError
from ray_accel.metrics.collect import OrphanReading


def recorded(**over: Any) -> Any:
    p0 = SimpleNamespace(partition="p0", node_id="n0", alive=True)
    p1 = SimpleNamespace(partition="p1", node_id="n1", alive=True)
    gone = SimpleNamespace(partition="p2", node_id="n2", alive=False)
    fields = {"partitions": [p0, p1, gone], "gcs_address": "10.0.0.1:6379", "auth": "the auth", "gcs_alive": True}
    return SimpleNamespace(**{**fields, **over})


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    from ray_accel.cluster import auth, status
    from ray_accel.metrics import snapshots
    from ray_accel.rayapi import driver

    made: list[tuple[str, object]] = []
    record = SimpleNamespace(gcs_address="10.0.0.1:6379", auth="the auth")
    monkeypatch.setattr(status, "cluster_nodes", lambda timeout_s=5.0: (record, {"n0": "node"}))
    monkeypatch.setattr(auth, "apply", lambda a: made.append(("auth", a)))
    monkeypatch.setattr(driver, "pushed_messages_to_stderr", lambda: made.append(("stderr", None)))
    monkeypatch.setattr(driver, "without_arrow_serializers", lambda: made.append(("no arrow", None)))
    monkeypatch.setattr(snapshots, "connect", lambda address: made.append(("connect", address)))
    monkeypatch.setattr(ray, "shutdown", lambda: made.append(("shutdown", None)))
    return made


def test_no_cluster_is_refused_before_anything_is_set_up(
    monkeypatch: pytest.MonkeyPatch, calls: list[tuple[str, object]]
) -> None:
    from ray_accel.cluster import status

    def no_cluster(timeout_s: float = 5.0) -> None:
        raise RayAccelError("no cluster: no ray-accel partitions recorded on this host")

    monkeypatch.setattr(status, "cluster_nodes", no_cluster)
    with pytest.raises(RayAccelError, match=r"^no cluster: no ray-accel partitions recorded on this host"):
        connect_to_recorded_cluster()
    assert calls == []


def test_a_driver_takes_the_recorded_auth_and_prints_pushed_messages_to_stderr(
    calls: list[tuple[str, object]],
) -> None:
    assert connect_to_recorded_cluster()[1] == {"n0": "node"}
    assert calls == [("auth", "the auth"), ("stderr", None), ("no arrow", None), ("connect", "10.0.0.1:6379")]


def test_orphans_and_workloads_come_from_each_live_partitions_exporter_and_a_silent_one_is_named(
    monkeypatch: pytest.MonkeyPatch, calls: list[tuple[str, object]]
) -> None:
    from ray_accel.metrics import snapshots as export

    orphan = {"device_id": "mock:0", "host": "h", "partition": "p0", "pid": 42, "command": "python x.py"}
    replica = {"workload": "ray::ServeReplica:a:D[7]", "partition": "p0", "pid": 7, "replica_id": "abc"}
    asked: list[dict[str, str]] = []

    def snapshots(live: dict[str, str], timeout_s: float) -> dict[str, Any]:
        asked.append(dict(live))
        return {"n0": {"orphans": [orphan], "workloads": [replica]}, "n1": "actor died"}

    monkeypatch.setattr(export, "snapshots", snapshots)
    got = from_exporters(recorded())
    assert asked == [{"n0": "p0", "n1": "p1"}], "only live partitions are asked"
    orphans = (OrphanReading("mock:0", "h", "p0", 42, "python x.py"),)
    assert got == FromExporters(orphans, ("p1: actor died",), (replica,)), "each workload as its exporter wrote it"
    assert calls[-1] == ("shutdown", None), "the driver leaves"
    monkeypatch.setattr(export, "snapshots", lambda live, timeout_s: {"n0": {}})
    assert from_exporters(recorded()).orphan_errors == ("p0: no sample yet",)


def test_a_cluster_that_cannot_be_asked_is_reported_not_raised(
    monkeypatch: pytest.MonkeyPatch, calls: list[tuple[str, object]]
) -> None:
    from ray_accel.cluster import status

    def no_cluster(timeout_s: float = 5.0) -> None:
        raise RayAccelError("no cluster: no ray-accel partitions recorded on this host")

    monkeypatch.setattr(status, "cluster_nodes", no_cluster)
    got = from_exporters(recorded())
    assert got.orphans == () and got.orphan_errors == (
        "metrics exporters not reachable: RayAccelError: no cluster: no ray-accel partitions recorded on this host",
    )
    assert calls == [("shutdown", None)]


def test_jobs_leave_the_cluster_even_when_reading_fails(
    monkeypatch: pytest.MonkeyPatch, calls: list[tuple[str, object]]
) -> None:
    from ray_accel.cli import jobs

    def broken(record: object) -> None:
        raise RayAccelError("the job store did not answer")

    monkeypatch.setattr(jobs, "top_jobs", broken)
    with pytest.raises(RayAccelError, match="did not answer"):
        jobs.read_recorded_jobs()
    assert calls[-1] == ("shutdown", None), "the driver leaves before the interpreter's exit"


def test_leaving_without_ray_imported_imports_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from ray_accel.cli.connect import leave_cluster

    monkeypatch.delitem(sys.modules, "ray")
    leave_cluster()
    assert "ray" not in sys.modules
