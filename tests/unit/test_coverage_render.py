"""`status` as text for a host whose record has everything `status` can
show: the inherited mask, the dashboard, a decider that is not running, a
partition drained and a device out; what `start` prints after; and an empty
cluster view."""

from __future__ import annotations

from ray_accel.cli import render
from ray_accel.cluster.status import ClusterView, DeciderStatus, HealthSummary, HostStatus, PartitionStatus
from ray_accel.core.health import DeviceHealth, Health, HealthEvent
from ray_accel.core.health_state import OnUnhealthy, PartitionState, PartState
from ray_accel.partition.plan import MaskView


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
