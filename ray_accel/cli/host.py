"""`ray-accel devices` and `ray-accel plan`: what this host has, and how it would split."""

from __future__ import annotations

import os

import click

from ray_accel.cli import render
from ray_accel.cli.output import emit
from ray_accel.cli.params import split_options
from ray_accel.cluster.raylet import Split
from ray_accel.core.reader import dump
from ray_accel.partition.inherited import inherited_mask, plan_within_mask
from ray_accel.plugins.discovery import discover

json_option = click.option("--json", "as_json", is_flag=True, help="machine-readable output")


@click.command()
@click.option("--backend", help="only this backend (an installed backend's name, as `devices` lists them)")
@json_option
def devices(backend: str | None, as_json: bool) -> int:
    """List the accelerators of this host and every backend's state."""
    inventory = discover(backend)
    payload = inventory.to_json()
    plugin = inventory.primary
    # The host's devices are listed whole, but a mask set in the environment is
    # read here as `plan`/`start` read it, so a bad one is exit 2 naming it
    # rather than a listing that looks fine (a bad mask is bad input).
    mask = None if plugin is None else inherited_mask(plugin, os.environ)
    if mask is not None:
        payload["inherited_mask"] = {"env": mask.env, "value": mask.value, "ids": list(mask.ids)}
    return emit(as_json, payload, lambda _: render.devices_text(inventory))


@click.command()
@split_options(
    "number of partitions (raylets)",
    "devices per partition, e.g. 'a=0-3;b=4-7' (indexes, ranges or ids; implies --mode manual)",
    "plan for this backend's devices",
)
@json_option
def plan(split: Split, as_json: bool) -> int:
    """Show how this host would be split into partitions, one raylet each, and
    each one's share of the host's CPUs and memory (as `start --head` would
    give them: the head raylet's share first, out of the host's)."""
    from ray_accel.cluster.host import HEAD_SHARE, divide_host, partitions_host, read_host
    from ray_accel.cluster.start import kept_dir, kept_out

    plugin = discover(split.backend).require_primary()
    mask = inherited_mask(plugin, os.environ)
    host_type = plugin.host_info().accelerator_type
    result = plan_within_mask(
        plugin.list_devices(), split.mode, split.partitions, split.manual, mask, host_type, traits=plugin.traits
    )
    out, notes = kept_out(kept_dir(), result, plugin.list_devices())
    for note in notes:
        click.echo(note, err=True)
    host = read_host({})
    left = partitions_host(host, HEAD_SHARE)
    division = divide_host(result.partitions, [q.numa_nodes for q in result.quality], left)
    payload = result.to_json()
    for part, share in zip(payload["partitions"], division.shares, strict=True):
        part.update(
            cpus=share.cpus,
            cpu_set=None if share.cpu_set is None else list(share.cpu_set),
            cpu_pin=share.pin_reason,
            memory=share.memory,
            object_store_memory=share.object_store_memory,
        )
    payload["cpu_pinning"] = division.pinning
    payload["host"] = dump(host)
    # The partitions' shares and the head's add up to `host`: the one key that says where the rest went.
    payload["head"] = dump(HEAD_SHARE)
    payload["host_warnings"] = list(division.warnings)
    payload["out_of_service"] = [{"device": o.device, "partition": o.partition, "reason": o.reason} for o in out]
    return emit(as_json, payload, lambda _: render.plan_text(result, division, HEAD_SHARE))
