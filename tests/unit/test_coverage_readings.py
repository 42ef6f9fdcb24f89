"""Readings that come from Ray's private API or the decider, where they are
not as expected: a Ray without the death reasons' names, a free-resources
answer with odd types, a neuron-monitor report that is not one."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from ray_accel_neuron.monitor import READINGS_KEY

from ray_accel.rayapi import gcs, state
from ray_accel.rayapi.feature import module
from tests.fakes.neuron_env import LS_STUB, executable, ls_only
from tests.unit.test_neuron_telemetry import telemetry


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


def test_a_drivers_free_resources_are_plain_names_and_floats(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = {"ab": {"CPU": 2, "memory": 1.5}, "cd": {}}
    monkeypatch.setattr(module("ray._private.state"), "available_resources_per_node", lambda: answer)
    got = state.available_resources_per_node()
    assert got == {"ab": {"CPU": 2.0, "memory": 1.5}, "cd": {}}
    assert isinstance(got["ab"]["CPU"], float)


def test_a_report_that_is_not_one_is_not_used_and_says_why(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    t = telemetry(ls_only(tmp_path, executable(tmp_path / "neuron-ls", LS_STUB), "trn1.32xlarge.json"))
    with caplog.at_level(logging.WARNING, logger="ray_accel_neuron.telemetry"):
        t.use_host_readings({READINGS_KEY: ["not", "a", "report"], "why": None}, None)
    assert "neuron-monitor readings not used: neuron-monitor printed a list, not a report object" in caplog.text
    s = t.device_samples()[0]
    assert s.utilization is None and s.memory_used_bytes is None
