"""`ray-accel start`: one raylet per partition on this host.

Each raylet is an ordinary `ray start`, run through `ray_accel.cluster.raylet_launch`
so the bridge is installed where detection happens, with its mask in the
environment (a comma list: the only form Ray parses), its resources, its own
block of ports, and the partition labels. Everything that can be checked is
checked before the host's lock is taken and the first raylet starts. From then
on, any failure, a launch timeout, Ctrl-C, SIGTERM or SIGHUP stops every
process this start began (`launcher.Launches.undo`) and removes the record,
so a failed start leaves nothing behind.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from importlib.util import find_spec
from types import FrameType

from ray_accel.bridge.managers import (
    LOST_WITHOUT_BRIDGE,
    BridgeSpec,
    BridgeUnsupported,
    check_ray_version,
    raylet_env,
)
from ray_accel.cluster import auth, identity, procs, state
from ray_accel.cluster.gcs import Progress, wait_registered
from ray_accel.cluster.host import divide_host, read_host
from ray_accel.cluster.launcher import Launches, LaunchResult
from ray_accel.cluster.ports import RayletPorts, check_free, plan_ports, worker_port_count
from ray_accel.cluster.raylet import DEFAULT_GCS_PORT, StartRequest, check_user_keys, partition_env, raylet_base_env
from ray_accel.cluster.record import HostRecord, PartitionEntry
from ray_accel.cluster.startargs import flag_value, ray_start_args, validate_ray_args
from ray_accel.core import validate
from ray_accel.core.errors import InputError, RayAccelError
from ray_accel.core.numa import format_cpulist
from ray_accel.metrics.export import ExporterEntry
from ray_accel.partition.inherited import inherited_mask, plan_within_mask
from ray_accel.partition.labels import topology_labels
from ray_accel.partition.plan import Partition, Plan
from ray_accel.partition.share import Division, Share
from ray_accel.plugins.inventory import discover


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP while processes are being started: handled as Ctrl-C."""


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM and SIGHUP raise `Interrupted` in the main thread (as SIGINT
    raises KeyboardInterrupt), so the cleanup of a half-done start runs
    instead of the process dying with its raylets orphaned."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def shielded() -> Iterator[None]:
    """No SIGINT, SIGTERM or SIGHUP while cleaning up: a second Ctrl-C must
    not leave the cleanup half-done."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, signal.SIG_IGN) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def refuse_running(action: str, place: state.Place) -> list[state.Place]:
    """The places of this host's stale records (all their processes gone):
    `place` and any other record of this host (another of its addresses, an
    earlier version's); `InputError` if one names running partitions or
    cannot be trusted."""
    stale = []
    places = [place, *(p for p in state.records_of_this_host() if p != place)]
    for where in places:
        record = state.load(where)
        if record is None:
            continue
        for warning in state.check_host(record, where, action):
            state.warn(warning)
        checks = procs.require_trusted(record, str(where.file), action)
        if any(c.ours for c in checks.values()):
            raise InputError(
                f"ray-accel partitions are already running on this host ({where.file}); "
                "run `ray-accel stop` first, or `ray-accel start --recover`"
            )
        stale.append(where)
    return stale


def client_server_available() -> bool:
    """Whether `ray start --head` would start Ray's client server: Ray 2.60
    checks that `grpc` imports (`ray._private.utils.get_ray_client_dependency_error`)."""
    return find_spec("grpc") is not None


def cpu_share(ray_args: Sequence[str], units: int, total_units: int) -> float:
    """The CPUs a partition's raylet may count, for sizing its worker ports:
    the user's --num-cpus as given (an upper bound however it is divided), or
    the host's CPUs in proportion to the partition's units."""
    given = flag_value(ray_args, "--num-cpus")
    if given is not None:
        return validate.finite_float(given, "--num-cpus", 0, 1 << 20)
    return (os.cpu_count() or 1) * units / max(1, total_units)


def worker_ports(plan: Plan, ray_args: Sequence[str], max_workers: int | None) -> list[int]:
    total = sum(len(p.core_ids) for p in plan)
    if max_workers is not None:
        return [max_workers for _ in plan]
    return [worker_port_count(math.ceil(cpu_share(ray_args, len(p.core_ids), total)), len(p.core_ids)) for p in plan]


def entry(
    part: Partition, head: bool, ports: RayletPorts, result: LaunchResult, share: Share, labels: Mapping[str, str]
) -> PartitionEntry:
    return PartitionEntry(
        name=part.name,
        device_ids=tuple(part.device_ids),
        core_ids=tuple(part.core_ids),
        head=head,
        ports=ports,
        processes=result.processes,
        node_id=result.node_id,
        node_ip=result.node_ip,
        log=result.log,
        accelerator_type=part.accelerator_type,
        models=tuple(part.models),
        share=share,
        labels=tuple(labels.items()),
    )


# What the CLI runs once every partition is up, under the lock and inside the
# undo of a failed start (the health layer starts the host's decider).
After = Callable[[HostRecord, Progress], HostRecord]


def start(
    req: StartRequest, progress: Progress, max_workers: int | None = None, after: After | None = None
) -> HostRecord:
    if req.head == bool(req.address):
        raise InputError("give exactly one of --head (start a cluster) or --address ADDR (join one)")
    validate_ray_args(req.ray_args)
    if not req.dashboard and flag_value(req.ray_args, "--include-dashboard") not in (None, "false", "False", "0"):
        raise InputError("--no-dashboard contradicts `-- --include-dashboard true`: give one of them")
    plugin = discover(req.backend).require_primary()
    spec = BridgeSpec.from_plugin(plugin)
    mask = inherited_mask(plugin, os.environ)
    devices = plugin.list_devices()
    plan = plan_within_mask(
        devices, req.mode, req.partitions, req.manual, mask, spec.accelerator_type, traits=spec.traits
    )
    req.partitions = len(plan)
    check_user_keys(req.labels, req.resources, spec)
    division = divide_host(plan, read_host(req.ray_args, req.resources))
    for warning in (*plan.warnings, *division.warnings):
        progress(f"warning: {warning}")
    if plan.mask is not None:
        progress(str(plan.mask["description"]))
    # The address every raylet of this host uses, given to each of them (so the
    # host label, the record and Ray agree, and `--recover` keeps it).
    ip = identity.node_ip(req.ray_args, req.address)
    req.ray_args = identity.with_node_ip(req.ray_args, ip)
    # What a placement policy on any host needs to know of each partition.
    labels = topology_labels(plan.partitions, devices, identity.this_host(ip), spec.family, spec.resource_name)
    gcs_port = req.port or DEFAULT_GCS_PORT
    if req.head:
        check_free([gcs_port], "--port")
    ports = plan_ports(
        worker_ports(plan, req.ray_args, max_workers), req.port_base, req.head and client_server_available()
    )
    if req.head and any(gcs_port in p.all() for p in ports):
        raise InputError(f"--port {gcs_port} falls inside the partitions' port blocks; choose another --port-base")

    place = state.place_for(ip)
    with state.host_lock("start", place), interruptible():
        stale = refuse_running("start", place)
        # Last of the checks, so refused input never leaves a new token behind. A
        # head makes a token if there is none; a joining raylet must be given one.
        cluster_auth = auth.resolve(os.environ, state.ensure_dir(place), create=req.head)
        if cluster_auth.warning:
            progress(f"warning: {cluster_auth.warning}")
        base_env = raylet_base_env(cluster_auth)
        try:
            check_ray_version()
            base_env.update(raylet_env([spec], base_env))
        except BridgeUnsupported as e:
            progress(f"warning: {e}; raylets start with explicit resources and masks. {LOST_WITHOUT_BRIDGE}")
        for old in stale:  # a record whose processes are all gone is stale
            state.clear(old)
        launches = Launches(state.ensure_dir(place), req.timeout_s)
        try:
            record = _launch_all(
                req, ip, plan, division, labels, spec, ports, gcs_port, cluster_auth, base_env, launches, progress
            )
            wait_registered(
                record.gcs_address,
                [p.node_id for p in record.partitions if p.node_id],
                req.timeout_s,
                progress,
                cluster_auth,
            )
            if req.metrics:
                record = deploy_metrics(record, record.partitions, progress)
            if after is not None:
                record = after(record, progress)
        except BaseException as e:
            with shielded():
                why = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
                stopped = stop_decider(place) + launches.undo()
                state.clear(place)
                progress(f"start {why}: stopped the {len(stopped)} processes it had started")
            raise
    return record


def _launch_all(
    req: StartRequest,
    ip: str,
    plan: Plan,
    division: Division,
    labels: Mapping[str, Mapping[str, str]],
    spec: BridgeSpec,
    ports: Sequence[RayletPorts],
    gcs_port: int,
    cluster_auth: auth.Auth,
    base_env: dict[str, str],
    launches: Launches,
    progress: Progress,
) -> HostRecord:
    def job(i: int, gcs: str | None) -> tuple[str, list[str], dict[str, str]]:
        part = plan[i]
        share = division.shares[i]
        own = spec.for_partition(part)  # its raylet advertises its own devices' type
        args = ray_start_args(
            part,
            ports[i],
            own,
            head=req.head and i == 0,
            gcs=gcs,
            gcs_port=gcs_port,
            share=share,
            user_args=req.ray_args,
            user_labels=req.labels,
            dashboard=req.dashboard,
            extra_labels=labels[part.name],
        )
        pinned = f", CPUs {format_cpulist(share.cpu_set)}" if share.cpu_set is not None else ""
        progress(f"starting {part.name}: {spec.visible_ids_env}={part.visible_ids}{pinned}")
        return part.name, args, partition_env(base_env, own, part, share)

    entries: list[PartitionEntry] = []
    record: HostRecord | None = None
    gcs = req.address
    first = 0
    dashboard_url: str | None = None
    if req.head:
        (head,) = launches.run_all([job(0, None)])
        dashboard_url = head.dashboard_url
        if not head.ok or head.gcs_address is None:
            raise RayAccelError(f"head partition {plan[0].name} failed: {head.error}")
        gcs = head.gcs_address
        entries.append(entry(plan[0], True, ports[0], head, division.shares[0], labels[plan[0].name]))
        first = 1
    assert gcs is not None
    record = HostRecord(
        host=state.host_name(),
        host_ip=ip,
        created=time.time(),
        head=req.head,
        mode=plan.mode.value,
        spec=spec,
        ray_args=tuple(req.ray_args),
        gcs_address=gcs,
        gcs_port=gcs_port if req.head else None,
        auth=cluster_auth,
        partitions=tuple(entries),
        labels=tuple(req.labels.items()),
        dashboard_url=dashboard_url,
        cpu_pinning=division.pinning,
        inherited_mask=plan.mask,
        health=req.health,
    )
    if entries:
        # Written as soon as there is something to stop: a start killed
        # outright (SIGKILL) still leaves `stop` what it needs.
        state.save(record)
    results = launches.run_all([job(i, gcs) for i in range(first, len(plan))])
    entries += [
        entry(plan[i], False, ports[i], r, division.shares[i], labels[plan[i].name])
        for i, r in zip(range(first, len(plan)), results, strict=True)
    ]
    record = record.with_partitions(entries)
    state.save(record)
    failed = [r for r in results if not r.ok]
    if failed:
        raise RayAccelError(f"partition {failed[0].name} failed: {failed[0].error}")
    return record


def stop_decider(place: state.Place, grace_s: float = 10.0) -> list[int]:
    """Stop the health decider the record at `place` names, if it is ours
    (a failed start, and `stop` before anything else); the PIDs signalled."""
    try:
        record = state.load(place)
    except RayAccelError:
        return []
    if record is None or record.decider is None or not procs.check(record.decider).ours:
        return []
    return procs.terminate([record.decider.record], grace_s)


def host_level_partition(record: HostRecord) -> str | None:
    """The partition whose exporter also exports the host's own values: the
    first one serving (one the decider stopped has no exporter)."""
    serving = [p.name for p in record.partitions if p.decider_state is None]
    return serving[0] if serving else None


def exporter_entries(parts: Sequence[PartitionEntry]) -> list[ExporterEntry]:
    """What an exporter is told of its partition: the devices its raylet serves."""
    return [ExporterEntry(p.name, p.node_id, tuple(p.serving.device_ids)) for p in parts if p.node_id]


def deploy_metrics(record: HostRecord, parts: Sequence[PartitionEntry], progress: Progress) -> HostRecord:
    """Metrics are secondary: a failure here is reported, not fatal."""
    from ray_accel.metrics import export as exporter

    try:
        names = exporter.deploy(
            record.gcs_address,
            exporter_entries(parts),
            host_level_partition=host_level_partition(record),
            state_dir=str(state.place_of(record).directory),
        )
        progress(f"metrics exporters: {', '.join(names)}")
        record = replace(record, metrics=True)
    except Exception as e:
        progress(f"warning: metrics exporters not started: {type(e).__name__}: {e}")
        record = replace(record, metrics=False)
    state.save(record)
    return record
