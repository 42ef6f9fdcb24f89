"""`ray-accel status`: this host's partitions, from the record, /proc and the GCS;
`status --cluster`: every host's partitions, from the GCS alone.

Read-only: it takes no lock, creates no directory and starts nothing. A
partition is alive only if its recorded raylet is still that raylet
(`procs.check`); a process the record misnames is reported, never called ours.
The cluster view reads the node table of the GCS this host's record names
(no driver, so it never starts a cluster) and claims no process of any host:
another host's partitions are what their raylets' labels say they are, and
each raylet's host is the host name and node IP Ray records for it, so two
hosts that share a name are two hosts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ray_accel.cluster import auth, statedir
from ray_accel.cluster.auth import Auth
from ray_accel.cluster.host import Share
from ray_accel.cluster.record import HostRecord, PartitionEntry, RayProcess, RecordError
from ray_accel.core.checks import CheckResult, RepairResult
from ray_accel.core.errors import RayAccelError
from ray_accel.core.health import DeviceHealth, Health
from ray_accel.core.health_state import OnUnhealthy, PartitionState, read_health
from ray_accel.core.visibility import format_visible_ids
from ray_accel.partition.plan import (
    CORES_LABEL,
    DEVICES_LABEL,
    PARTITION_LABEL,
    RESOURCE_LABEL,
    TYPE_LABEL,
    LabelError,
    MaskView,
    decode_ids,
    node_host,
)
from ray_accel.rayapi.gcs import GcsError, GcsNode, gcs_nodes

if TYPE_CHECKING:  # the process checks are this host's view only: `status --cluster` does without them
    from ray_accel.cluster import procs


@dataclass(frozen=True, kw_only=True)
class PartitionStatus:
    """One partition of `status`; the fields are its JSON keys."""

    partition: str
    # What its raylet serves now; `out`: its devices out of service.
    device_ids: tuple[str, ...]
    core_ids: tuple[int, ...]
    visible_ids: str
    out: tuple[str, ...]
    health: PartitionState | None
    accelerator_type: str | None
    models: tuple[str, ...]
    pid: int | None
    node_id: str | None
    head: bool
    alive: bool
    registered: bool | None
    in_use: dict[str, float]
    total: dict[str, float]
    worker_ports: tuple[int, int]
    problems: tuple[str, ...]
    share: Share | None
    cpu_set: tuple[int, ...] | None
    log: str | None


@dataclass(frozen=True)
class DeciderStatus:
    pid: int | None
    alive: bool


@dataclass(frozen=True, kw_only=True)
class HealthSummary:
    """The decider and what it saw: its action, whether it runs, every device
    that is not healthy with its last event."""

    action: OnUnhealthy
    interval_s: float
    drain_deadline_s: float
    decider: DeciderStatus
    at: float | None
    polls: int | None
    not_healthy: tuple[DeviceHealth, ...]
    errors: tuple[str, ...]
    # Each out device's last check and repair (the decider's proof before it returns).
    checks: tuple[CheckResult, ...] = ()
    repairs: tuple[RepairResult, ...] = ()


@dataclass(frozen=True, kw_only=True)
class HostStatus:
    """`status`; the fields are its JSON keys."""

    running: bool
    host: str
    host_ip: str | None
    state_file: str | None
    state_dir: str
    gcs_address: str | None
    gcs_alive: bool
    # The head's dashboard (state API, jobs): `ray job submit --address <this>`.
    dashboard_address: str | None
    cpu_pinning: str | None = None
    inherited_mask: MaskView | None = None
    auth: Auth | None = None
    # Exactly what a driver needs in its environment (a path, never the token).
    env: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    partitions: tuple[PartitionStatus, ...] = ()
    health: HealthSummary | None = None  # None: no decider recorded
    head: PartitionStatus | None = None  # a head's own raylet (no devices), apart from the partitions
    change: ChangeStatus | None = None  # a host change under way, or interrupted
    unassigned: tuple[UnassignedStatus, ...] = ()  # devices no partition serves since a change could not start theirs


@dataclass(frozen=True, kw_only=True)
class ChangeStatus:
    """A host change in the record; the fields are its `status --json` keys."""

    kind: str
    step: str  # the step written last: under way, or where it was interrupted
    since: float
    running: bool  # its process still runs; False: interrupted, `start --recover` finishes it
    pid: int | None
    touched: tuple[str, ...]
    starting: tuple[str, ...]  # the partitions it has still to start


@dataclass(frozen=True)
class UnassignedStatus:
    """Devices no partition serves; the fields are its `status --json` keys."""

    device_ids: tuple[str, ...]
    core_ids: tuple[int, ...]
    reason: str


def status() -> HostStatus:
    found = statedir.locate()
    record = statedir.load(found.place) if found.place is not None else None
    if record is None or found.place is None:
        note, where = found.note(), str(statedir.search_root())
        return HostStatus(
            running=False,
            host=statedir.host_name(),
            host_ip=None,
            state_file=None,
            state_dir=where,
            gcs_address=None,
            gcs_alive=False,
            dashboard_address=None,
            warnings=(note,) if note else (),
        )
    return describe(record, found.place)


def describe(record: HostRecord, place: statedir.Place) -> HostStatus:
    from ray_accel.cluster import procs

    warnings: list[str] = []
    checks: dict[RayProcess, procs.Check] = {}
    try:
        warnings += statedir.check_host(record, place, "status")
    except RecordError:
        warnings.append(
            f"the record was written on host {record.host!r}, this is {statedir.host_name()!r}: "
            "its processes are not this host's"
        )
    else:
        checks = procs.check_record(record)
    foreign = [c for c in checks.values() if c.verdict is procs.Verdict.FOREIGN]
    warnings += [f"state file {place.file} names {c.describe()}; it is not counted as ours" for c in foreign]
    if record.stopping:
        warnings.append("a `ray-accel stop` is stopping these partitions")

    gcs = [r for p in record.raylets() for r in p.of_kind("gcs_server")]
    gcs_up = not gcs or any(r in checks and checks[r].ours for r in gcs)
    try:
        auth.apply(record.auth)
        nodes = gcs_nodes(record.gcs_address, 3.0) if gcs_up else None
    except GcsError as e:  # the local view stands without it; say why it lacks registrations
        nodes = None
        warnings.append(str(e))
    try:
        health = read_health(place.directory)
    except RayAccelError as e:
        health = None
        warnings.append(str(e))
    resource = record.spec.resource_name

    def row(p: PartitionEntry) -> PartitionStatus:
        raylet = p.raylet()
        raylets = [checks[r].ours for r in p.of_kind("raylet") if r in checks]
        alive = bool(raylets) and all(raylets)
        node = (nodes or {}).get(p.node_id or "")
        total = node.total if node else {}
        avail = node.available if node else {}
        problems = [checks[r].describe() for r in p.processes if r in checks and not checks[r].ours]
        return PartitionStatus(
            partition=p.name,
            device_ids=p.serving.device_ids,
            core_ids=p.serving.core_ids,
            visible_ids=p.visible_ids,
            out=p.out,
            health=None if record.health is None or p.head else record.state_of(p),
            accelerator_type=p.accelerator_type,
            models=p.models,
            pid=raylet.pid if raylet else None,
            node_id=p.node_id,
            head=p.head,
            alive=alive,
            registered=(node is not None and node.alive) if nodes is not None else None,
            in_use={k: total[k] - avail.get(k, 0.0) for k in (resource, "CPU") if k in total},
            total={k: total[k] for k in (resource, "CPU") if k in total},
            worker_ports=(p.ports.min_worker_port, p.ports.max_worker_port),
            problems=tuple(problems),
            share=p.share,
            cpu_set=None if p.share is None else p.share.cpu_set,
            log=p.log,
        )

    out = [row(p) for p in record.partitions]
    head = None if record.head_raylet is None else row(record.head_raylet)
    summary = None
    if record.health is not None:
        decider = record.decider
        alive = decider is not None and decider in checks and checks[decider].ours
        out_ids = {d for p in record.partitions for d in p.out}
        summary = HealthSummary(
            action=record.health.action,
            interval_s=record.health.interval_s,
            drain_deadline_s=record.health.drain_deadline_s,
            decider=DeciderStatus(None if decider is None else decider.pid, alive),
            at=None if health is None else health.at,
            polls=None if health is None else health.polls,
            not_healthy=() if health is None else tuple(d for d in health.devices if d.state is not Health.HEALTHY),
            errors=() if health is None else health.errors,
            checks=() if health is None else tuple(c for c in health.checks if c.device_id in out_ids),
            repairs=() if health is None else tuple(r for r in health.repairs if r.device_id in out_ids),
        )
    return HostStatus(
        running=any(p.alive for p in out) or bool(head and head.alive),
        host=record.host,
        host_ip=record.host_ip,
        state_file=str(place.file),
        state_dir=str(place.directory),
        gcs_address=record.gcs_address,
        gcs_alive=gcs_up,
        dashboard_address=record.dashboard_url,
        cpu_pinning=record.cpu_pinning,
        inherited_mask=record.inherited_mask,
        auth=record.auth,
        env=record.auth.env(),
        warnings=tuple(warnings),
        partitions=tuple(out),
        health=summary,
        head=head,
        change=_change(record, checks),
        unassigned=tuple(UnassignedStatus(u.device_ids, u.core_ids, u.reason) for u in record.unassigned),
    )


def _change(record: HostRecord, checks: Mapping[RayProcess, procs.Check]) -> ChangeStatus | None:
    change = record.change
    if change is None:
        return None
    owner = change.owner
    running = owner is not None and owner in checks and checks[owner].ours
    return ChangeStatus(
        kind=change.kind,
        step=change.step,
        since=change.since,
        running=running,
        pid=None if owner is None else owner.pid,
        touched=change.touched,
        starting=tuple(t.name for t in change.target),
    )


def _id_label(
    labels: Mapping[str, str], key: str, where: str, warnings: list[str], decoded: dict[str, tuple[int, ...] | str]
) -> list[int] | None:
    """The ids a label names; None (with a warning naming it) when missing or
    unreadable. `decoded`: each label text read so far, its ids or why it is
    unreadable (every host's partitions carry the same few texts)."""
    text = labels.get(key)
    if text is None:
        return None
    if text not in decoded:
        try:
            decoded[text] = decode_ids(text)
        except LabelError as e:
            decoded[text] = str(e)
    ids = decoded[text]
    if isinstance(ids, str):
        warnings.append(f"{where}: {ids}")
        return None
    return list(ids)


def _resources(amounts: Mapping[str, float]) -> dict[str, float]:
    # `node:<ip>` and `node:__internal_head__` are Ray's per-node markers, not capacity.
    return {k: float(v) for k, v in sorted(amounts.items()) if not k.startswith("node:")}


@dataclass(frozen=True, kw_only=True)
class ClusterPartition:
    """One partition raylet of `status --cluster`; the fields are its JSON keys."""

    host: str
    host_name: str
    partition: str
    node_id: str
    ip: str
    alive: bool
    resource: str | None
    accelerator_type: str | None
    core_ids: list[int] | None
    mask: str | None
    device_indexes: list[int] | None
    total: dict[str, float]
    available: dict[str, float]


@dataclass(frozen=True)
class ClusterHost:
    host: str
    name: str
    ips: tuple[str, ...]
    partitions: int
    alive: int


@dataclass(frozen=True)
class ClusterView:
    """`status --cluster`; the fields are its JSON keys."""

    gcs_address: str
    hosts: tuple[ClusterHost, ...]
    partitions: tuple[ClusterPartition, ...]
    other_nodes: int
    replaced_dead: int
    warnings: tuple[str, ...]


def cluster_view(gcs_address: str, nodes: Mapping[str, GcsNode]) -> ClusterView:
    """The `status --cluster` view of the GCS's node table (`gcs.gcs_nodes`):
    every node carrying the partition label, sorted by host (its name and node
    IP as Ray records them: `node_host`) and partition; a dead one (a stopped
    host's raylets stay in the table) only where no live raylet has taken its
    host and partition or one of its units (`status --cluster` and `top`)."""
    warnings: list[str] = []
    parts: list[ClusterPartition] = []
    others = 0
    # Worked out once per host and per label text, not once per partition.
    host_keys: dict[tuple[str, str], str] = {}
    decoded: dict[str, tuple[int, ...] | str] = {}
    masks: dict[tuple[int, ...], str] = {}
    for node_id, n in nodes.items():
        labels = n.labels
        if PARTITION_LABEL not in labels:
            others += 1
            continue
        if n.hostname and n.ip:
            if (n.hostname, n.ip) not in host_keys:
                host_keys[n.hostname, n.ip] = node_host(n.hostname, n.ip, labels)
            host = host_keys[n.hostname, n.ip]
        else:  # the label names the host: nothing to share
            host = node_host(n.hostname, n.ip, labels)
        where = f"{host}/{labels[PARTITION_LABEL]} ({node_id[:12]})"
        cores = _id_label(labels, CORES_LABEL, where, warnings, decoded)
        if cores is not None and tuple(cores) not in masks:
            masks[tuple(cores)] = format_visible_ids(cores, "ranges")
        parts.append(
            ClusterPartition(
                host=host,
                host_name=n.hostname,
                partition=labels[PARTITION_LABEL],
                node_id=node_id,
                ip=n.ip,
                alive=n.alive,
                resource=labels.get(RESOURCE_LABEL),
                accelerator_type=labels.get(TYPE_LABEL),
                core_ids=cores,
                mask=None if cores is None else masks[tuple(cores)],
                device_indexes=_id_label(labels, DEVICES_LABEL, where, warnings, decoded),
                total=_resources(n.total),
                available=_resources(n.available),
            )
        )

    # A partition restarted (`--recover`, or its host joined again) leaves its dead
    # predecessor in the GCS, a repartition the partitions it merged or split; show a
    # dead raylet only where no live one serves its host and partition or one of its units.
    def claims(p: ClusterPartition) -> set[tuple[str, str | int]]:
        return {(p.host, k) for k in (p.partition, *(p.core_ids or ()))}

    taken = {c for p in parts if p.alive for c in claims(p)}
    kept = sorted(
        (p for p in parts if p.alive or not claims(p) & taken),
        key=lambda p: (p.host, p.partition, not p.alive, p.node_id),
    )
    on_host: dict[str, list[ClusterPartition]] = {}
    for p in kept:
        on_host.setdefault(p.host, []).append(p)
    hosts = tuple(
        ClusterHost(
            host, ps[0].host_name, tuple(dict.fromkeys(p.ip for p in ps if p.ip)), len(ps), sum(p.alive for p in ps)
        )
        for host, ps in on_host.items()
    )
    return ClusterView(gcs_address, hosts, tuple(kept), others, len(parts) - len(kept), tuple(warnings))


def recorded() -> tuple[HostRecord, statedir.Place]:
    """This host's record and where it is; "no cluster" (exit 1) when none is
    recorded, as `status --cluster`, `health`, `top` and `jobs` say it."""
    found = statedir.locate()
    record = statedir.load(found.place) if found.place is not None else None
    if record is None or found.place is None:
        note = found.note()
        where = found.place.file if found.place is not None else statedir.search_root()
        raise RayAccelError(
            f"no cluster: no ray-accel partitions recorded on this host ({where}); see `ray-accel start`"
            + (f" ({note})" if note else "")
        )
    return record, found.place


def cluster_nodes(timeout_s: float = 5.0) -> tuple[HostRecord, dict[str, GcsNode]]:
    """This host's record and the node table of the GCS it names; "no
    cluster" (exit 1) when none is recorded or its GCS does not answer."""
    record, place = recorded()
    auth.apply(record.auth)
    nodes = gcs_nodes(record.gcs_address, timeout_s)
    if nodes is None:
        raise RayAccelError(
            f"no cluster: the GCS at {record.gcs_address} recorded in {place.file} did not answer within {timeout_s:g}s"
        )
    return record, nodes


def cluster_status(timeout_s: float = 5.0) -> ClusterView:
    """Every host's partitions in the cluster this host's record names (`cluster_nodes`)."""
    record, nodes = cluster_nodes(timeout_s)
    return cluster_view(record.gcs_address, nodes)
