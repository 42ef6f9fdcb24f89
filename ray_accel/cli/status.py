"""`ray-accel status`: this host's partitions; `status --cluster`: every host's.

Its own module, so `status --cluster` (which a script may run every few
seconds) imports only the cluster view's path, not `start`'s.
"""

from __future__ import annotations

from typing import Any

import click

from ray_accel.cli import render
from ray_accel.cli.output import emit, json_option
from ray_accel.core.reader import dump_fields


@click.command("status")
@click.option(
    "--cluster",
    is_flag=True,
    help="every host's partitions, from the GCS of the cluster this host joined (host, node, IP, mask, resources)",
)
@json_option
def status_command(cluster: bool, as_json: bool) -> int:
    """Show this host's partitions: masks, raylet PIDs, alive or dead, what is
    in use, and processes that hold their devices without being their workers."""
    from ray_accel.cluster.status import cluster_status, status

    if cluster:
        return emit(as_json, cluster_status(), render.cluster_status_text)

    from ray_accel.cli.connect import from_exporters

    payload = status()
    # Only a GCS that answered is asked through a driver: ray.init on a dead
    # or foreign address waits for minutes (Ray's own GCS connect timeout).
    answered = any(p.registered is not None for p in payload.partitions)
    seen = from_exporters(payload) if payload.running and payload.gcs_alive and answered else None
    shown = payload if seen is None else with_workloads(dump_fields(payload, **dump_fields(seen)))
    return emit(as_json, shown, lambda _: render.status_with_exporters_text(payload, seen))


def with_workloads(shown: dict[str, Any]) -> dict[str, Any]:
    """`status --json` with each partition's own workloads under it (`workloads`,
    as `top --json` has them), as well as all of them at the top."""
    partitions = [
        {**p, "workloads": [w for w in shown["workloads"] if w.get("partition") == p["partition"]]}
        for p in shown["partitions"]
    ]
    return {**shown, "partitions": partitions}
