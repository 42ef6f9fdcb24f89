"""Asking the GCS directly: a GCS that does not answer in time stays apart
from one that answers with an error, and the error reaches the caller with
its cause (never stored and dropped)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ray_accel.cluster import statedir
from ray_accel.cluster import status as status_mod
from ray_accel.core.errors import RayAccelError
from ray_accel.rayapi import gcs
from ray_accel.rayapi.feature import RayApiMissing, module
from ray_accel.rayapi.gcs import GcsNode

ADDRESS = "192.0.2.7:6379"


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Lets a query stub that blocks return once the test is done."""
    done = threading.Event()
    yield done
    done.set()


def test_an_error_answer_raises_with_its_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    cause = PermissionError("token rejected")

    def answer(address: str) -> tuple[GcsNode, ...]:
        raise cause

    monkeypatch.setattr(gcs, "read_nodes", answer)
    with pytest.raises(gcs.GcsError) as err:
        gcs.gcs_nodes(ADDRESS, timeout_s=5.0)
    assert str(err.value) == f"the GCS at {ADDRESS} answered with an error: PermissionError: token rejected"
    assert err.value.__cause__ is cause


def test_no_answer_in_time_is_none_not_an_error(monkeypatch: pytest.MonkeyPatch, release: threading.Event) -> None:
    def silent(address: str) -> tuple[GcsNode, ...]:
        release.wait(30)
        return ()

    monkeypatch.setattr(gcs, "read_nodes", silent)
    assert gcs.gcs_nodes(ADDRESS, timeout_s=0.2) is None


def test_a_missing_seam_is_not_taken_for_an_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(address: str) -> tuple[GcsNode, ...]:
        raise RayApiMissing("Ray 9.0.0: ray._private.state.GlobalState has no node_table")

    monkeypatch.setattr(gcs, "read_nodes", missing)
    with pytest.raises(RayApiMissing, match="GlobalState has no node_table"):
        gcs.gcs_nodes(ADDRESS)


def test_an_answer_is_the_node_table(monkeypatch: pytest.MonkeyPatch) -> None:
    node = GcsNode(
        node_id="ab12",
        alive=True,
        total={"CPU": 2.0},
        available={"CPU": 1.0},
        labels={"ray-accel.io/partition": "p0"},
        ip="10.0.0.2",
        hostname="h",
    )
    monkeypatch.setattr(gcs, "read_nodes", lambda address: (node,))
    assert gcs.gcs_nodes(ADDRESS) == {"ab12": node}


def test_waiting_for_raylets_reports_the_error_once_and_names_it_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(address: str) -> tuple[GcsNode, ...]:
        raise PermissionError("token rejected")

    monkeypatch.setattr(gcs, "read_nodes", refused)
    said: list[str] = []
    with pytest.raises(RayAccelError) as err:
        gcs.wait_registered(ADDRESS, ["n1", "n2"], 1.0, said.append)
    error = f"the GCS at {ADDRESS} answered with an error: PermissionError: token rejected"
    assert said.count(f"warning: {error}") == 1, said
    assert str(err.value) == f"only 0/2 raylets registered with {ADDRESS} within 1s; the last query: {error}"


def test_cluster_status_names_the_error_apart_from_no_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    record = SimpleNamespace(gcs_address=ADDRESS, auth=None)
    place = statedir.Place(Path("/s"), Path("/s/host.json"), True)
    monkeypatch.setattr(statedir, "locate", lambda: statedir.Found(place))
    monkeypatch.setattr(statedir, "load", lambda where: record)
    monkeypatch.setattr(status_mod.auth, "apply", lambda a: None)

    def refused(address: str) -> tuple[GcsNode, ...]:
        raise PermissionError("token rejected")

    monkeypatch.setattr(gcs, "read_nodes", refused)
    with pytest.raises(gcs.GcsError, match="answered with an error: PermissionError: token rejected"):
        status_mod.cluster_status(2.0)


def test_without_rays_reason_names_a_dead_node_says_why_by_number(monkeypatch: pytest.MonkeyPatch) -> None:
    class Table:
        def _initialize_global_state(self, options: Any) -> None: ...

        def total_resources_per_node(self) -> dict[str, Any]:
            return {}

        def available_resources_per_node(self) -> dict[str, Any]:
            return {}

        def node_table(self) -> list[dict[str, Any]]:
            return [{"NodeID": "cd", "Alive": False, "DeathReason": 3, "DeathReasonMessage": "gone"}]

    monkeypatch.setattr(module("ray._private.state"), "GlobalState", Table)
    monkeypatch.setitem(sys.modules, "ray.core.generated.common_pb2", None)
    assert gcs.read_nodes("192.0.2.1:6379") == (
        gcs.GcsNode(node_id="cd", alive=False, death_reason="3", death_message="gone"),
    )
