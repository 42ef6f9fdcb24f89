"""This process as the Ray worker a partition's exporter runs in, its gauges
recorded, for the tests of the exporter."""

from __future__ import annotations

import pytest


class _Gauge:
    def __init__(self, name: str, description: str, tag_keys: tuple[str, ...]) -> None:
        self.values: list[tuple[float, dict[str, str]]] = []

    def set(self, value: float, tags: dict[str, str]) -> None:
        self.values.append((value, tags))


def as_exporter_worker(monkeypatch: pytest.MonkeyPatch, node_id: str) -> None:
    """This process as the Ray worker an exporter runs in: on raylet `node_id`
    at 10.0.0.1, its gauges recorded by `_Gauge`."""
    import ray
    import ray.util.metrics

    monkeypatch.setattr(ray, "get_runtime_context", lambda: type("Context", (), {"get_node_id": lambda _: node_id})())
    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "10.0.0.1")
    monkeypatch.setattr(ray.util.metrics, "Gauge", _Gauge)
