"""`ray-accel start`: one raylet per partition on this host, and on a head a
raylet of its own without devices (the GCS, dashboard and drivers), so that
every device can be drained, restarted and repartitioned like any.

Each raylet is an ordinary `ray start`, run through `ray_accel.cluster.raylet_launch`
so the bridge is installed where detection happens, with its mask in the
environment (a comma list: the only form Ray parses), its resources, its own
block of ports, and the partition labels.

The frozen request is turned once into a frozen `LaunchPlan` (`plan_launch`:
every check that can be made before the host's lock is taken; a device the
kept device health has out of service stays in its partition as planned,
out of what its raylet serves, until `ray-accel health clear`). Under the
host's lock `start` makes the token file the plan's auth needs, if any, and
the raylets are launched from that plan (`launch`). From the first launch on, any
failure, a launch timeout, Ctrl-C, SIGTERM or SIGHUP stops every process this
start began (`launcher.Launches.undo`, then the host's helpers) and removes
the record, so a failed start leaves nothing behind.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

from ray_accel.bridge.managers import LOST_WITHOUT_BRIDGE, BridgeSpec, BridgeUnsupported, check_ray_version, raylet_env
from ray_accel.cluster import auth, exporters, helpers, procs
from ray_accel.cluster import statedir as state
from ray_accel.cluster.host import (
    HEAD_SHARE,
    MIN_WORKER_PORTS,
    Division,
    RayletPorts,
    Share,
    check_free,
    divide_host,
    node_ip,
    partitions_host,
    plan_ports,
    read_host,
    this_host,
    worker_ports,
)
from ray_accel.cluster.launcher import Launches
from ray_accel.cluster.raylet import DEFAULT_GCS_PORT, RayletLaunch, StartRequest
from ray_accel.cluster.raylet_launch import LaunchReport
from ray_accel.cluster.record import HostRecord, PartitionEntry
from ray_accel.cluster.signals import interruptible, shielded
from ray_accel.core.devices import Device
from ray_accel.core.errors import InputError, RayAccelError
from ray_accel.core.health_kept import KEPT_FILE, out_of_service
from ray_accel.core.health_state import HEALTH_FILE
from ray_accel.core.numa import format_cpulist
from ray_accel.core.validate import HEAD
from ray_accel.partition.inherited import inherited_mask, plan_within_mask
from ray_accel.partition.plan import HOST_LABEL, Partition, Plan, check_user_keys, topology_labels
from ray_accel.plugins.discovery import discover
from ray_accel.rayapi.gcs import Progress, wait_registered


@dataclass(frozen=True, kw_only=True)
class LaunchPlan:
    """What a start launches, made once from its request: the partitions, each
    one's share of the host, ray-accel's labels and port block for each raylet
    (a head's own first), the head's GCS port, the node IP every raylet uses,
    the bridge's spec, the cluster's auth."""

    request: StartRequest
    plan: Plan
    division: Division
    labels: Mapping[str, Mapping[str, str]]  # ray-accel's own, by raylet name
    ports: tuple[RayletPorts, ...]  # by raylet, as `raylets`
    gcs_port: int
    node_ip: str
    spec: BridgeSpec
    bridge_env: Mapping[str, str]  # the bridge's variables for every raylet; none where Ray cannot take it
    auth: auth.Auth
    notes: tuple[str, ...]  # said before the first raylet starts
    out: tuple[OutOfServiceDevice, ...]
    served: tuple[Partition, ...]  # each partition as its raylet serves it: less its devices `out`

    @property
    def raylets(self) -> list[PlannedRaylet]:
        """Each raylet this start launches: a head's own first (no devices)."""
        none = Partition(HEAD, (), ())
        head = [(none, none, HEAD_SHARE)] if self.request.join.head else []
        own = [*head, *zip(self.plan.partitions, self.served, self.division.shares, strict=True)]
        return [
            PlannedRaylet(planned=planned, served=served, share=share, ports=ports)
            for (planned, served, share), ports in zip(own, self.ports, strict=True)
        ]


@dataclass(frozen=True, kw_only=True)
class PlannedRaylet:
    """One raylet of a start: its partition as planned and as its raylet
    serves it (less its devices out of service), its share and its port block."""

    planned: Partition
    served: Partition
    share: Share
    ports: RayletPorts


@dataclass(frozen=True)
class OutOfServiceDevice:
    """A planned device the kept device health has out of service."""

    device: str
    partition: str
    reason: str
    units: tuple[int, ...]


def kept_dir() -> Path | None:
    """Where this host keeps its device health, found without a node IP
    (`plan`): RAYACCEL_STATE_DIR, else the default layout's first directory holding it."""
    root = state.search_root()
    if os.environ.get(state.STATE_ENV) or not root.is_dir():
        return root
    return next((p for p in sorted(root.iterdir()) if (p / KEPT_FILE).is_file() or (p / HEALTH_FILE).is_file()), None)


def kept_out(
    state_dir: Path | None, plan: Plan, devices: Sequence[Device]
) -> tuple[tuple[OutOfServiceDevice, ...], list[str]]:
    """The planned devices device health has out of service
    (`health_kept.out_of_service`), and what to say of them; every device of
    a partition out is an `InputError` (a raylet serves at least one)."""
    found = out_of_service(state_dir, now=time.time())
    why = found.devices
    notes = [f"warning: {found.note}"] if found.note else []
    units = {d.id: d.core_ids for d in devices}
    out = []
    for part in plan.partitions:
        gone = [d for d in part.device_ids if d in why]
        if gone and len(gone) == len(part.device_ids):
            raise InputError(
                f"every device of partition {part.name} is out of service ({why[gone[0]]}); "
                f"`ray-accel health clear {gone[0]}` returns one, or plan without them"
            )
        for d in gone:
            out.append(OutOfServiceDevice(d, part.name, why[d], tuple(units.get(d, ()))))
            notes.append(
                f"{d} is out of service ({why[d]}): {part.name} starts without it; "
                f"`ray-accel health clear {d}` returns it"
            )
    return tuple(out), notes


def refuse_running(action: str, place: state.Place) -> list[state.Place]:
    """The places of this host's stale records (all their processes gone):
    `place` and any other record of this host (another of its addresses, an
    earlier version's); `InputError` if one names running partitions or
    cannot be trusted."""
    stale = []
    places = [place, *(p for p in state.candidates()[0] if p != place)]
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


def plan_launch(req: StartRequest, ip: str, state_dir: Path) -> LaunchPlan:
    """Every check of `req` against this host, and what it launches; it reads
    the host, never writes (a refused start leaves nothing behind)."""
    plugin = discover(req.split.backend).require_primary()
    spec = BridgeSpec.from_plugin(plugin)
    notes = []
    try:  # what every raylet's environment needs for the bridge: the base environment's variables it extends
        check_ray_version()
        bridge_env = raylet_env([spec], os.environ)
    except BridgeUnsupported as e:
        bridge_env = {}
        notes.append(f"warning: {e}; raylets start with explicit resources and masks. {LOST_WITHOUT_BRIDGE}")
    devices = plugin.list_devices()
    mask = inherited_mask(plugin, os.environ)
    split = req.split
    plan = plan_within_mask(
        devices, split.mode, split.partitions, split.manual, mask, spec.accelerator_type, traits=spec.traits
    )
    check_user_keys(req.offer.labels, req.offer.resources, spec.resource_name)
    out, out_notes = kept_out(state_dir, plan, devices)
    gone, units = {o.device for o in out}, {c for o in out for c in o.units}
    served = tuple(p.less(gone, units) for p in plan)
    # What a placement policy on any host needs to know of each partition.
    this = this_host(ip)
    labels = {HEAD: {HOST_LABEL: this.key}, **topology_labels(served, devices, this, spec.family, spec.resource_name)}
    host = read_host(req.ray.figures, req.offer.resources)
    # A head's own raylet takes its share out of the host's figures first; the partitions divide what is left.
    left = partitions_host(host, HEAD_SHARE if req.join.head else None)
    division = divide_host(plan.partitions, [q.numa_nodes for q in plan.quality], left)
    gcs_port = req.join.port or DEFAULT_GCS_PORT
    if req.join.head:
        check_free([gcs_port], "--port")
    workers = worker_ports([len(p.core_ids) for p in plan], req.ray.figures.get("cpus"), req.offer.max_workers)
    workers = [MIN_WORKER_PORTS, *workers] if req.join.head else workers  # the head's own block first
    ports = plan_ports(workers, req.join.port_base, req.join.head and client_server_available())
    if req.join.head and any(gcs_port in p.all() for p in ports):
        raise InputError(f"--port {gcs_port} falls inside the partitions' port blocks; choose another --port-base")
    # A head makes a token if there is none; a joining raylet must be given one.
    cluster_auth = auth.decide(os.environ, state_dir, create=req.join.head)
    notes += [f"warning: {w}" for w in (*plan.warnings, *division.warnings)]
    notes += [] if plan.mask is None else [plan.mask.description]
    notes += [] if cluster_auth.warning is None else [f"warning: {cluster_auth.warning}"]
    return LaunchPlan(
        request=req,
        plan=plan,
        division=division,
        labels=labels,
        ports=tuple(ports),
        gcs_port=gcs_port,
        node_ip=ip,
        spec=spec,
        bridge_env=bridge_env,
        auth=cluster_auth,
        notes=(*notes, *out_notes),
        out=out,
        served=served,
    )


def start(req: StartRequest, progress: Progress, after: helpers.After | None = None) -> HostRecord:
    if req.join.head == bool(req.join.address):
        raise InputError("give exactly one of --head (start a cluster) or --address ADDR (join one)")
    if not req.services.dashboard and req.ray.include_dashboard not in (None, "false", "False", "0"):
        raise InputError("--no-dashboard contradicts `-- --include-dashboard true`: give one of them")
    # The address every raylet of this host uses, given to each of them (so the
    # host label, the record and Ray agree, and `--recover` keeps it).
    ip = node_ip(req.ray.node_ip, req.join.address)
    place = state.place_for(ip)
    lp = plan_launch(req, ip, place.directory)
    for note in lp.notes:
        progress(note)
    with state.host_lock("start", place), interruptible():
        for old in refuse_running("start", place):  # a record whose processes are all gone is stale
            state.clear(old)
        launches = Launches(log_dir=state.ensure_dir(place), timeout_s=req.timeout_s, forked=True)
        try:
            # The token file the plan's auth needs, made under the lock; this
            # process talks to the cluster with that auth from here on.
            cluster_auth = auth.provide(lp.auth, os.environ)
            base_env = auth.raylet_base_env(cluster_auth)
            try:
                record = launch(lp, cluster_auth, base_env, launches, progress)
            finally:
                launches.close()
            if req.services.metrics:
                record = exporters.deploy(record, record.partitions, progress)
            if after is not None:
                record = after(record, progress)
        except BaseException as e:
            with shielded():
                why = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
                stopped = helpers.stop(place) + launches.undo()
                state.clear(place)
                progress(f"start {why}: stopped the {len(stopped)} processes it had started")
            raise
    return record


def launch(
    lp: LaunchPlan, cluster_auth: auth.Auth, base_env: Mapping[str, str], launches: Launches, progress: Progress
) -> HostRecord:
    """Start the raylets of `lp` (the head's first, alone) from `base_env`
    (this process's, with `cluster_auth`, its token file made), recording each
    as it is up, and wait until the GCS has every one."""
    req, plan, head, raylets = lp.request, lp.plan, lp.request.join.head, lp.raylets
    env = {**base_env, **lp.bridge_env}

    user = req.ray.naming(lp.node_ip)

    def job(i: int, gcs: str | None) -> tuple[str, list[str], dict[str, str]]:
        raylet = raylets[i]
        part, share = raylet.served, raylet.share
        launch = RayletLaunch(
            part=part,
            ports=raylet.ports,
            spec=lp.spec.for_partition(part),  # its raylet advertises its own devices' type
            share=share,
            user=user,
            labels={**req.offer.labels, **lp.labels[part.name]},
            gcs=gcs,
            gcs_port=lp.gcs_port,
            dashboard=req.services.dashboard,
            # The host's one log monitor: with the head raylet, or joining, the first partition.
            log_monitor=i == 0,
        )
        pinned = f", CPUs {format_cpulist(share.cpu_set)}" if share.cpu_set is not None else ""
        progress(f"starting {part.name}: {lp.spec.visible_ids_env}={part.visible_ids}{pinned}")
        return launch.job(env)

    def entry(i: int, result: LaunchReport) -> PartitionEntry:
        raylet = raylets[i]
        part = raylet.planned
        return PartitionEntry(
            name=part.name,
            device_ids=tuple(part.device_ids),
            core_ids=tuple(part.core_ids),
            head=head and i == 0,
            ports=raylet.ports,
            processes=result.processes,
            node_id=result.node_id,
            node_ip=result.node_ip,
            log=result.log,
            accelerator_type=part.accelerator_type,
            models=tuple(part.models),
            share=raylet.share,
            labels=tuple(lp.labels[part.name].items()),
            out=tuple(o.device for o in lp.out if o.partition == part.name),
            out_core_ids=tuple(c for o in lp.out if o.partition == part.name for c in o.units),
        )

    launches.check_files([r.served.name for r in raylets])
    gcs, first = req.join.address, 0
    heads: list[LaunchReport] = []
    if head:
        (ours,) = heads = launches.run_all([job(0, None)])
        if not ours.ok or ours.gcs_address is None:
            raise RayAccelError(f"the head raylet failed: {ours.error}")
        gcs, first = ours.gcs_address, 1
    assert gcs is not None
    record = HostRecord(
        host=state.host_name(),
        host_ip=lp.node_ip,
        created=time.time(),
        head=head,
        mode=plan.mode.value,
        spec=lp.spec,
        ray_args=user.args,
        gcs_address=gcs,
        gcs_port=lp.gcs_port if head else None,
        auth=cluster_auth,
        partitions=(),
        labels=tuple(req.offer.labels.items()),
        dashboard_url=heads[0].dashboard_url if heads else None,
        cpu_pinning=lp.division.pinning,
        inherited_mask=plan.mask,
        health=req.health,
        head_raylet=entry(0, heads[0]) if heads else None,
        port_base=req.join.port_base,
        max_workers=req.offer.max_workers,
        resources=tuple(req.offer.resources.items()),
    )
    if heads:
        # Written as soon as there is something to stop: a start killed
        # outright (SIGKILL) still leaves `stop` what it needs.
        state.save(record)
    results = launches.run_all([job(i, gcs) for i in range(first, len(raylets))])
    record = state.save(record.with_partitions([entry(first + i, r) for i, r in enumerate(results)]))
    failed = [r for r in results if not r.ok]
    if failed:
        raise RayAccelError(f"partition {failed[0].name} failed: {failed[0].error}")
    nodes = [p.node_id for p in record.raylets() if p.node_id]
    wait_registered(record.gcs_address, nodes, req.timeout_s, progress)
    return record
