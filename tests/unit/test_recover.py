"""One partition's restart (`relaunch`) with the launch stood in for: it
starts on its recorded ports and share with its labels, keeps the head's
cluster-wide processes, stops only its own raylet's ours, and says why when
the raylet does not come back; a share from a record that kept none."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from ray_accel.cluster import procs, recover
from ray_accel.cluster.host import Share
from ray_accel.cluster.record import RayProcess
from ray_accel.core.errors import RayAccelError
from tests.records import RAY, valid_record

NEW_RAYLET = RayProcess("raylet", 5000, 2000, f"{RAY}/core/src/ray/raylet/raylet")


class Launches:
    """What `relaunch` hands the launcher, and the one result it gets back."""

    def __init__(self, ok: bool = True) -> None:
        self.ok = ok
        self.asked: list[Any] = []

    def run_all(self, launches: list[tuple[str, list[str], dict[str, str]]]) -> list[Any]:
        self.asked += launches
        if not self.ok:
            return [SimpleNamespace(ok=False, error="raylet exited with 1 (see /state/p1.log)")]
        return [SimpleNamespace(ok=True, processes=(NEW_RAYLET,), node_id="cd" * 28, node_ip="10.0.0.1", log="l")]


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[int], str]]:
    asked: list[tuple[list[int], str]] = []
    monkeypatch.setattr(recover, "check_free", lambda ports, what: asked.append((list(ports), what)))
    # The environment a restart starts from, without applying the record's auth to this process.
    monkeypatch.setattr(recover, "raylet_base_env", lambda auth: {"A": "1"})
    return asked


def test_a_partition_restarts_on_its_recorded_ports(  # the first too: the GCS is the head raylet's
    checked: list[tuple[list[int], str]],
) -> None:
    record = valid_record()
    head = replace(
        record.partitions[0],
        share=Share(partition="p0", cpus=3, memory=4_000_000_000, object_store_memory=1_000_000_000),
    )
    said: list[str] = []
    launches = Launches()
    new = recover.relaunch(record, head, head.serving, {"ray-accel/x": "1"}, launches, said.append)
    named = head.ports.named
    assert checked == [([named["node_manager_port"], named["object_manager_port"]], "restarting p0")]
    ((name, args, env),) = launches.asked
    assert name == "p0" and str(named["node_manager_port"]) in args and env["A"] == "1"
    assert said == [f"restarting p0: NEURON_RT_VISIBLE_CORES={head.serving.visible_ids}"]
    assert [r.kind for r in new.processes] == ["raylet"]
    assert new.processes[0] == NEW_RAYLET and new.node_id == "cd" * 28 and new.labels == (("ray-accel/x", "1"),)


def test_a_raylet_that_does_not_come_back_is_an_error_naming_why(checked: list[tuple[list[int], str]]) -> None:
    record = valid_record()
    p1 = replace(
        record.partitions[1],
        share=Share(partition="p1", cpus=3, memory=4_000_000_000, object_store_memory=1_000_000_000),
    )
    with pytest.raises(RayAccelError, match=r"^partition p1 did not restart: raylet exited with 1"):
        recover.relaunch(record, p1, p1.serving, {}, Launches(ok=False), lambda _: None)


def test_only_the_raylets_own_processes_that_are_ours_are_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    head = valid_record().head_raylet
    assert head is not None
    stopped: list[Any] = []
    monkeypatch.setattr(procs, "terminate", lambda records: stopped.extend(records))
    ours = {r: SimpleNamespace(ours=r.kind != "ray_client_server") for r in head.processes}
    recover.terminate_raylet(head, ours)  # type: ignore[arg-type]
    assert stopped == [r.record for r in head.processes if r.kind != "ray_client_server"]


def test_a_record_without_shares_divides_the_host_by_units_as_start_does() -> None:
    record = valid_record()
    shares = [recover.recorded_share(p, record) for p in record.partitions]
    assert [s.partition for s in shares] == ["p0", "p1"]
    assert abs(shares[0].cpus - shares[1].cpus) <= 1, "16 cores each: equal parts"
    kept = Share(partition="p1", cpus=3, memory=4_000_000_000, object_store_memory=1_000_000_000)
    assert recover.recorded_share(replace(record.partitions[1], share=kept), record) is kept


def monitor(pid: int) -> RayProcess:
    return RayProcess("log_monitor", pid, 3000 + pid, f"{RAY}/_private/log_monitor.py")


def with_monitor(entry: Any, pid: int) -> Any:
    return replace(entry, processes=(*entry.processes, monitor(pid)))


def test_one_log_monitor_per_host_the_head_keeps_it() -> None:
    record = valid_record()
    record = replace(record, head_raylet=with_monitor(record.head_raylet, 10))
    for name in ("p0", "p1", "new"):
        assert not recover.carries_log_monitor(record, name, lambda r: True), name
    # The head's monitor gone (its raylet ended): the next raylet started takes it on.
    assert recover.carries_log_monitor(record, "p1", lambda r: False)


def test_a_joining_hosts_monitor_moves_with_the_partition_that_had_it() -> None:
    record = replace(valid_record(), head=False, head_raylet=None)
    p0, p1 = record.partitions
    record = replace(record, partitions=(with_monitor(p0, 20), p1))
    # p0 restarted (recover, shrink, return): its own old monitor does not count.
    assert recover.carries_log_monitor(record, "p0", lambda r: True)
    assert not recover.carries_log_monitor(record, "p1", lambda r: True)
    # p0 stopped by a repartition that replaced it: the first new raylet takes it.
    assert recover.carries_log_monitor(record, "p01", lambda r: r.pid != 20)
    # Nobody has one (a record from before): the raylet started takes it.
    assert recover.carries_log_monitor(replace(record, partitions=(p0, p1)), "p1", lambda r: True)


def test_the_raylet_started_asks_ray_for_a_log_monitor_only_where_it_carries_it(
    checked: list[tuple[list[int], str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    record = valid_record()
    record = replace(record, head_raylet=with_monitor(record.head_raylet, 10))
    asked: list[int] = []
    monkeypatch.setattr(procs, "check", lambda r: asked.append(r.pid) or SimpleNamespace(ours=alive))
    for alive, expected in ((True, ["--include-log-monitor", "false"]), (False, [])):
        launches = Launches()
        recover.relaunch(record, record.partitions[1], record.partitions[1].serving, {}, launches, lambda _: None)
        ((_, args, _),) = launches.asked
        flag = "--include-log-monitor"
        found = [a for i, a in enumerate(args) if flag in (a, args[i - 1])]
        assert found == expected, alive
    assert asked == [10, 10], "only the other raylets' monitors are looked at"
