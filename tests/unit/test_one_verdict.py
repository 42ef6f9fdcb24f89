"""One verdict per device: the family rule's. Six minutes after XID 79 the
sample's five-minute window has passed, yet `ray_accel_device_healthy`,
`ray_accel_device_health_state` and `top` all say unhealthy, as the CUDA
rule keeps a fatal XID until it is cleared."""

from __future__ import annotations

import os

from ray_accel_cuda import CudaPlugin
from ray_accel_cuda.health import XID_WINDOW_S

from ray_accel.cli import render
from ray_accel.cli.top import top_payload
from ray_accel.cluster.status import ClusterPartition
from ray_accel.core.health import Health
from ray_accel.core.health_state import HealthSettings, HostHealth, PartitionHealth, PartState, dumps, parse_health
from ray_accel.core.processes import process_table
from ray_accel.metrics.collect import Where, collect
from ray_accel.metrics.export import gauge_values, health_values, partition_health
from tests.fakes import fake_nvml


class Clock:
    """A wall clock the test moves."""

    def __init__(self) -> None:
        self.now = 1_764_000_000.0

    def __call__(self) -> float:
        return self.now


def test_six_minutes_after_xid_79_both_gauges_and_top_say_unhealthy() -> None:
    clock = Clock()
    nv = fake_nvml.a100x8_nvlink()
    plugin = CudaPlugin(nv, environ={}, clock=clock, wall_clock=clock)
    assert plugin.probe() is None
    nv.discovered = True
    devices = plugin.list_devices()
    plugin.health.poll()
    plugin.telemetry.device_samples()  # both register for XID events
    nv.events.append((1, 79))
    assert plugin.health.poll().devices[1].state is Health.UNHEALTHY
    assert plugin.telemetry.device_samples()[1].recent_events == 1

    clock.now += 6 * 60
    assert 6 * 60 > XID_WINDOW_S
    report = plugin.health.poll()
    snap = collect(plugin.telemetry, devices, "A100", os.getpid(), (), process_table(), Where("h", "node", "p0"))
    bad = devices[1].id
    assert [d.recent_events for d in snap.devices] == [0] * 8, "the sample's window has passed"
    part = PartitionHealth(
        partition="p0",
        state=PartState.SERVING,
        since=clock.now,
        devices=tuple(d.id for d in devices),
        out=(),
        node_id="node",
        detail="",
    )
    # As the exporter reads it: the decider's file.
    health = parse_health(
        dumps(HostHealth(at=clock.now, settings=HealthSettings(), devices=report.devices, partitions=(part,))),
        "health.json",
    )

    healthy = {tags["device_id"]: v for key, v, tags in gauge_values(snap, None, health) if key == "healthy"}
    assert healthy == {d.id: 0.0 if d.id == bad else 1.0 for d in devices}
    states = {
        tags["device_id"]: tags["state"] for key, v, tags in health_values(health, "h") if key == "d_state" and v == 1.0
    }
    assert states[bad] == "unhealthy" and all(states[d.id] == "healthy" for d in devices if d.id != bad)

    payload = top_payload(
        [
            ClusterPartition(
                host="h",
                host_name="h",
                partition="p0",
                node_id="node",
                ip="10.0.0.1",
                alive=True,
                resource=None,
                accelerator_type=None,
                core_ids=None,
                mask=None,
                device_indexes=None,
                total={},
                available={},
            )
        ],
        {"node": {**snap.to_json(), "health": partition_health(health, "p0")}},
    )
    row = next(d for d in payload["devices"] if d["id"] == bad)
    assert row["healthy"] is False and row["health_state"] == "unhealthy" and row["recent_events"] == 0
    assert all(d["healthy"] is True for d in payload["devices"] if d["id"] != bad)
    line = next(line for line in render.top_text(payload).splitlines() if line.startswith(bad))
    assert line.split()[-1] == "unhealthy"
