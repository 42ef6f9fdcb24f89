"""`ray-accel repartition`: a new split of this host's running partitions,
the ones it does not touch left running."""

from __future__ import annotations

import click

from ray_accel.cli.output import emit, json_option, progress
from ray_accel.cli.params import PARTITION_COUNT, drain_deadline_option, seconds
from ray_accel.cluster.raylet import Split
from ray_accel.cluster.resplit import Changes


def changes_text(payload: Changes) -> str:
    if not payload.changes:
        return "nothing to change"
    return "\n".join(f"{c.partition}: {c.action.value} {','.join(c.devices)}" for c in payload.partitions)


@click.command()
@click.option("--partitions", type=PARTITION_COUNT, help="number of partitions")
@click.option("--mode", default=None, help="auto-split or manual (shared where the backend allows it)")
@click.option("--manual", metavar="SPEC", help="devices per partition, e.g. 'a=0-3;b=4-7' (implies --mode manual)")
@click.option("--dry-run", is_flag=True, help="print what would happen and change nothing")
@drain_deadline_option("seconds a touched partition's work gets to move before its raylet is stopped")
@seconds("--timeout", 1, 3600, 180.0, "seconds to wait for the new raylets")
@json_option
def repartition(
    partitions: int | None,
    mode: str | None,
    manual: str | None,
    dry_run: bool,
    drain_deadline: float,
    timeout: float,
    as_json: bool,
) -> int:
    """Split this host's devices anew, as `start` splits them: partitions whose
    devices stay as they are keep running; the others are drained through Ray,
    stopped, and started with their new devices."""
    from ray_accel.hostops.repartition import begin, follow, planned

    if partitions is None and mode is None and manual is None:
        raise click.UsageError("give the new split: --partitions N, --mode MODE or --manual SPEC")
    split = Split.given(mode, partitions, manual, None)
    place, _, plan = planned(split)
    say = progress()
    for warning in plan.warnings:
        say(f"warning: {warning}")
    if dry_run or not plan.resplit.changed:
        return emit(as_json, plan.view(), changes_text)
    proc, log, plan = begin(place, split, drain_deadline, timeout)
    return emit(as_json, follow(proc, log, plan, say), changes_text)
