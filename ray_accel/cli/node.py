"""`ray-accel devices` and `ray-accel plan`: what this host has, and how it would split."""

from __future__ import annotations

import click

from ray_accel.cli import render
from ray_accel.cli.output import emit
from ray_accel.cli.params import PARTITION_COUNT
from ray_accel.partition.plan import plan_partitions
from ray_accel.plugins.inventory import discover

json_option = click.option("--json", "as_json", is_flag=True, help="machine-readable output")


@click.command()
@click.option("--backend", help="only this backend (cuda, neuron, mock, ...)")
@json_option
def devices(backend: str | None, as_json: bool) -> int:
    """List the accelerators of this host and every backend's state."""
    return emit(as_json, discover(backend).to_json(), render.devices_text)


@click.command()
@click.option("--mode", default="auto-split", show_default=True, help="shared, auto-split or manual")
@click.option("--partitions", "--agents", "partitions", type=PARTITION_COUNT, help="number of partitions (raylets)")
@click.option("--manual", metavar="SPEC", help="devices per partition, e.g. 'a=0-3;b=4-7' (indexes, ranges or ids)")
@click.option("--backend", help="plan for this backend's devices")
@json_option
def plan(mode: str, partitions: int | None, manual: str | None, backend: str | None, as_json: bool) -> int:
    """Show how this host would be split into partitions, one raylet each."""
    plugin = discover(backend).require_primary()
    node_type = plugin.node_info().accelerator_type
    return emit(
        as_json, plan_partitions(plugin.list_devices(), mode, partitions, manual, node_type).to_json(), render.plan_text
    )
