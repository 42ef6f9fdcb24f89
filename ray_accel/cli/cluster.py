"""`ray-accel start | stop`: the raylets of this host's partitions (`status` is `cli.status`)."""

from __future__ import annotations

import click

from ray_accel.cli import render
from ray_accel.cli.output import emit, json_option, progress
from ray_accel.cli.params import (
    HOST_PORT,
    MAX_WORKERS,
    PORT,
    check_timeout_option,
    drain_deadline_option,
    grouped,
    seconds,
    split_options,
)
from ray_accel.cluster.raylet import Join, Offer, Services, Split, StartRequest
from ray_accel.core import validate
from ray_accel.core.errors import InputError
from ray_accel.core.health_state import HealthSettings, OnUnhealthy, Repair
from ray_accel.core.reader import dump_fields

# The options a recover takes; every other one shapes a new start.
RECOVER_OPTIONS = ("head", "address", "recover", "timeout", "as_json")


@click.command(epilog="Options for every `ray start` go after `--`: ray-accel start --head -- --temp-dir /data/ray")
@grouped(
    "join",
    Join,
    click.option(
        "--head",
        is_flag=True,
        help="start a new cluster: its head is a raylet of its own, with no devices, before the partitions",
    ),
    click.option("--address", type=HOST_PORT, help="join the cluster whose GCS is at HOST:PORT"),
    click.option("--port", type=PORT, help="GCS port of the head (default 6379)"),
    click.option("--port-base", type=PORT, help="first port of the raylets' port blocks (default: first free)"),
)
@click.option("--recover", is_flag=True, help="restart dead partitions with their recorded masks")
@split_options(
    "number of partitions (default 1)",
    "devices per partition, e.g. 'a=0-3;b=4-7' (implies --mode manual)",
    "partition this backend's devices",
)
@seconds("--timeout", 1, 3600, 180.0, "seconds to wait for the raylets")
@grouped(
    "services",
    lambda no_metrics, no_dashboard: Services(not no_metrics, not no_dashboard),
    click.option("--no-metrics", is_flag=True, help="do not start the per-partition metrics exporters"),
    click.option("--no-dashboard", is_flag=True, help="do not start Ray's dashboard (state API, jobs) on the head"),
)
@grouped(
    "offer",
    lambda labels, resources, max_workers: Offer(
        validate.node_labels(labels) if labels is not None else {},
        validate.resource_amounts(resources) if resources is not None else {},
        max_workers,
    ),
    click.option("--labels", metavar="K=V,...", help="node labels for every partition (as `ray start --labels`)"),
    click.option(
        "--resources",
        metavar="JSON",
        help="custom resources of the host, divided between its partitions like CPUs (as `ray start --resources`)",
    ),
    click.option(
        "--max-workers",
        type=MAX_WORKERS,
        help="worker processes each raylet may run at once, which sizes its worker-port range "
        "(default: 2 per CPU + 4 per device unit + 64, at least 184)",
    ),
)
@click.option(
    "--block",
    is_flag=True,
    help="stay in the foreground once the partitions are up; stop them all on SIGTERM or Ctrl-C, "
    "exit 1 if one dies (for systemd, KubeRay, Slurm)",
)
@grouped(
    "health",
    lambda on_unhealthy, health_interval, drain_deadline, return_check, check_interval, check_timeout, repair: (
        HealthSettings(
            action=OnUnhealthy(on_unhealthy),
            interval_s=health_interval,
            drain_deadline_s=drain_deadline,
            return_check=return_check == "on",
            check_interval_s=check_interval,
            check_timeout_s=check_timeout,
            repair=Repair(repair),
        )
    ),
    click.option(
        "--on-unhealthy",
        type=click.Choice(["report", "drain", "shrink"]),
        default="report",
        show_default=True,
        help="when a device goes bad: report it only; drain its partition through Ray (its raylet stopped at the "
        "deadline); or drain, then restart the partition without the device. Either way it returns to service "
        "once the device is healthy again",
    ),
    seconds("--health-interval", 0.1, 3600, 5.0, "seconds between the health decider's polls"),
    drain_deadline_option("seconds a drained partition's work gets to move before its raylet is stopped"),
    click.option(
        "--return-check",
        type=click.Choice(["on", "off"]),
        default="on",
        show_default=True,
        help="a device out of service returns to its partition only once the backend's active check of it "
        "passes (off: as soon as it is healthy again)",
    ),
    seconds("--check-interval", 0, 3600, 10.0, "seconds between a failed (or timed out) check and the next"),
    check_timeout_option("seconds one active check of a device may take before it is killed (outcome timeout)"),
    click.option(
        "--repair",
        type=click.Choice(["off", "reset"]),
        default="off",
        show_default=True,
        help="reset: repair a device out of service as its driver asks (a GPU reset), once per fault, once "
        "its partition no longer serves it; reboot-only and operator's repairs are shown, never run",
    ),
)
@json_option
@click.pass_context
def start(
    ctx: click.Context,
    join: Join,
    recover: bool,
    split: Split,
    timeout: float,
    services: Services,
    offer: Offer,
    block: bool,
    health: HealthSettings,
    as_json: bool,
) -> int:
    """Start one raylet per partition of this host."""
    from ray_accel.cluster.block import supervise
    from ray_accel.cluster.raylet import RayOptions, flag_names
    from ray_accel.cluster.start import start as start_partitions
    from ray_accel.cluster.status import status
    from ray_accel.health.launch import ensure_decider, start_decider
    from ray_accel.hostops.recover import recover as recover_partitions

    ray_args: list[str] = ctx.obj["ray_args"] if ctx.obj else []
    if sum((join.head, join.address is not None, recover)) != 1:
        raise click.UsageError("give exactly one of --head, --address HOST:PORT or --recover")
    given = [
        f"--{name.replace('_', '-')}"
        for name in (str(p.name) for p in ctx.command.params if p.name not in RECOVER_OPTIONS)
        if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
    ]
    if "--block" in flag_names(ray_args):
        raise InputError(
            "--block after `--` would block inside one partition's `ray start`: use `ray-accel start --block`, "
            "which blocks once every partition is up and stops them all on SIGTERM"
        )
    if recover and (given or ray_args):
        raise InputError(f"--recover restarts partitions as recorded; it takes no {(given or ray_args)[0]}")
    if join.address is not None and join.port is not None:
        raise InputError("--port is the new head's GCS port; a raylet joining --address takes no --port")
    say = progress()
    if recover:
        recover_partitions(say, timeout, after=ensure_decider)
        return emit(as_json, status(), render.started_text)
    request = StartRequest(
        join=join,
        split=split,
        offer=offer,
        services=services,
        ray=RayOptions.read(ray_args),
        health=health,
        timeout_s=timeout,
    )
    record = start_partitions(request, say, after=start_decider)
    out = [{"device": d, "partition": p.name} for p in record.partitions for d in p.out]
    payload = status()
    emit(as_json, dump_fields(payload, out_of_service=out), lambda _: render.started_text(payload))
    return supervise(record, say) if block else 0


@click.command()
@seconds("--grace", 0, 600, 5.0, "seconds between SIGTERM and SIGKILL")
@json_option
def stop(grace: float, as_json: bool) -> int:
    """Stop exactly the processes `start` started on this host, by PID."""
    from ray_accel.cluster.stop import stop as stop_partitions

    return emit(as_json, stop_partitions(grace), lambda p: p.message)
