"""`ray-accel top`: partitions, devices and workloads, live, from the exporters' snapshots."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from ray_accel.cli import render
from ray_accel.cli.node import json_option
from ray_accel.cli.params import FiniteFloat
from ray_accel.core.errors import RayAccelError


def top_payload(status: dict[str, Any], snaps: dict[str, Any]) -> dict[str, Any]:
    devices: list[dict[str, Any]] = []
    workloads: list[dict[str, Any]] = []
    errors: list[str] = []
    for partition, snap in snaps.items():
        if isinstance(snap, str):
            errors.append(f"{partition}: {snap}")
            continue
        for d in snap.get("devices", []):
            devices.append(
                {
                    k: d[k]
                    for k in (
                        "id",
                        "partition",
                        "family",
                        "accelerator_type",
                        "utilization",
                        "memory_used_bytes",
                        "memory_total_bytes",
                        "healthy",
                        "reason",
                    )
                }
            )
        workloads += snap.get("workloads", [])
        errors += [f"{partition}: {e}" for e in snap.get("errors", [])]
    return {"partitions": status["partitions"], "devices": devices, "workloads": workloads, "errors": errors}


@click.command()
@click.option("--once", is_flag=True, help="print one view and exit")
@click.option(
    "--interval", type=FiniteFloat(0.1, 3600), default=2.0, show_default=True, help="seconds between refreshes"
)
@json_option
def top(once: bool, interval: float, as_json: bool) -> int:
    """Live view of this host's partitions, devices and workloads."""
    from ray_accel.cluster import auth
    from ray_accel.cluster.status import status as host_status
    from ray_accel.metrics import export

    status = host_status()
    if not status["partitions"] or not status["gcs_address"]:
        # Never fall through to ray.init(address=None): that starts a cluster.
        raise RayAccelError("no cluster: no ray-accel partitions recorded on this host (see `ray-accel start`)")
    auth.apply(auth.Auth.from_json(status["auth"]))
    export.connect(status["gcs_address"])
    while True:
        payload = top_payload(status, export.snapshots([p["partition"] for p in status["partitions"]]))
        if as_json:
            print(json.dumps(payload, indent=2))
        else:
            if not once:
                print("\033[2J\033[H", end="")
            print(render.top_text(payload), flush=True)
        if once:
            return 0
        time.sleep(interval)
        status = host_status()
