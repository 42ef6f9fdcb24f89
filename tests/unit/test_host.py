"""The host's amounts and ports (`ray_accel.cluster.host`): an object store
that leaves no memory, the CPUs allowed where no affinity can be had, a port
outside the range or taken, a base port given or searched for."""

from __future__ import annotations

import os
import socket

import pytest

from ray_accel.cluster import host as host_mod
from ray_accel.cluster.host import PortError, allowed_cpus, check_free, plan_ports, port_blocks, read_host
from ray_accel.core.errors import InputError


def test_an_object_store_as_large_as_the_host_is_refused_naming_the_flag() -> None:
    with pytest.raises(InputError, match=r"--object-store-memory \d+ leaves no memory for tasks"):
        read_host({"object_store_memory": 1 << 60})


def test_without_a_cpu_affinity_every_cpu_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(pid: int) -> set[int]:
        raise OSError("not here")

    monkeypatch.setattr(os, "sched_getaffinity", refused)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert allowed_cpus() == frozenset({0, 1, 2})


def test_a_port_outside_the_range_or_taken_is_refused_naming_it() -> None:
    with pytest.raises(PortError, match=r"^--port-base 80: port 80 is outside 1024\.\.65535$"):
        check_free([80], "--port-base 80")
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        taken = s.getsockname()[1]
        with pytest.raises(PortError, match=f"port {taken} is already in use"):
            check_free([taken], "x")


def test_a_given_base_is_used_when_free_and_without_any_free_block_the_user_is_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(host_mod, "is_free", lambda port, host="": True)
    assert plan_ports([2, 3], 30000) == port_blocks(30000, [2, 3], False)
    monkeypatch.setattr(host_mod, "is_free", lambda port, host="": False)
    with pytest.raises(PortError, match=r"no free block of \d+ ports found between 21000 and 65535; pass --port-base"):
        plan_ports([2], None)
