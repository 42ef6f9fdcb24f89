"""The host record: what `ray-accel start` started on this host, as typed,
frozen values (`HostRecord`, `PartitionEntry`, `HostChange`, `Spare`,
`RayProcess`), its schema, and its one parser and writer (`parse_record`,
`dumps`). Where the record lives, the lock and the other files of the state
directory are `ray_accel.cluster.statedir`'s.

The record is input like any other: it may be truncated, hand-edited, copied
from another host, or written by another version. `parse_record` checks every
field before anything acts on it and raises `RecordError` (exit 2) naming the
file and the field; nothing else escapes it, whatever the bytes. A PID from
the record is only a claim: `ray_accel.cluster.procs` decides whether the
process it names is still the one recorded.

Each version's change of shape has a number (`VERSION` is the one written),
and each older shape one named upgrade (`UPGRADES`), applied to the raw JSON
before the one parser of the current shape reads it: a version-3 record
(`node.json`, an earlier ray-accel's) goes through `_v3_node_json_to_v4`,
then, as every version-4 record, through the upgrades of the version-4
shapes the decider, the device-less head raylet and the host changes came
after, and `_v4_to_v5`. A record of a newer version is refused, naming it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TypeVar

from ray_accel.bridge.managers import BridgeSpec
from ray_accel.cluster.auth import Auth
from ray_accel.cluster.host import NAMED, RayletPorts, Share
from ray_accel.cluster.raylet import validate_ray_args
from ray_accel.core import reader, validate
from ray_accel.core.errors import InputError
from ray_accel.core.health_state import HealthSettings, PartitionState, PartState
from ray_accel.core.hosts import canonical_ip
from ray_accel.core.processes import ProcessRecord
from ray_accel.core.reader import Cursor, ReadError, dump, dump_fields, parse_document, show
from ray_accel.core.validate import HEAD
from ray_accel.core.visibility import format_visible_ids
from ray_accel.partition.plan import MaskView, Mode, Partition
from ray_accel.plugins.traits import DeviceTraits

# The versions, and what each changed; each older shape is read through its
# named upgrade (`UPGRADES`, below), never by a fallback in the parser.
# 4 (read without them too): the health decider's settings and process, and
# per partition its devices out of service and its state by the decider
# (`health`; an earlier 4 wrote `decider_state` instead:
# `_v4_decider_state_to_health`).
# 4: the host's node IP beside its name (`host_ip`), in `host.json`; the
# spec names its backend and carries its traits.
# 3 (`node.json`, an earlier ray-accel's): processes as {kind, pid,
# start_ticks, identity}, the host's name, ports per partition; read so that
# `stop` can stop what it names (2 had [pid, start ticks] pairs; 1 had
# wall-clock start times). Its spec names no backend and no traits: read as
# LEGACY_BACKEND with default traits, and written back without them.
# 5: the start's terms a host change plans with (`port_base`, `max_workers`,
# the user's host `resources`), a host change under way (`change`) and the
# devices no partition serves since a change could not start theirs
# (`unassigned`); a 4 is read with none of them.
VERSION = 5
READS = (3, 4, 5)
LEGACY_VERSION = 3
LEGACY_BACKEND = "unknown"
MAX_BYTES = 4 * 1024 * 1024
MAX_PARTITIONS = 1024
MAX_PROCESSES = 256
MAX_UNITS = 1 << 17
MAX_TEXT = 4096
# Linux's largest PID (PID_MAX_LIMIT, include/linux/threads.h).
PID_MAX = 1 << 22
_KIND = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
# An entry-point name (the backend's), as the packaging spec's entry-points
# page allows it: letters, digits, '.', '-', '_' (no '=', no spaces).
_BACKEND = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_RESOURCE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$")
_HEX_ID = re.compile(r"^[0-9a-f]{1,128}$")
# The kind of the host's health decider among the recorded processes.
DECIDER_KIND = "health_decider"
# The kind of a running `ray-accel repartition`'s helper.
REPARTITION_KIND = "repartition"
# An earlier 4's `decider_state`: a partition whose raylet the decider
# stopped on purpose, or was restarting under the host's lock.
DECIDER_STATES = ("stopped", "restarting")

T = TypeVar("T")


class RecordError(InputError):
    """The state record cannot be trusted: it does not fit the schema, names
    a process that is not the one recorded, or belongs to another host."""


@dataclass(frozen=True)
class RayProcess:
    """One process Ray started for a raylet, as recorded when it started:
    its kind (Ray's process type), PID, kernel start time and identity (what
    its command line said it runs: see `procs.identity`)."""

    kind: str
    pid: int
    start_ticks: int
    identity: str

    @property
    def record(self) -> ProcessRecord:
        return ProcessRecord(self.pid, self.start_ticks)


@dataclass(frozen=True, kw_only=True)
class PartitionEntry:
    name: str
    device_ids: tuple[str, ...]
    core_ids: tuple[int, ...]
    head: bool
    ports: RayletPorts
    processes: tuple[RayProcess, ...]
    node_id: str | None = None
    node_ip: str | None = None
    log: str | None = None
    accelerator_type: str | None = None  # the one type its raylet advertises, if any
    models: tuple[str, ...] = ()
    share: Share | None = None  # its part of the host, as started (None: a record from before)
    labels: tuple[tuple[str, str], ...] = ()  # ray-accel's own labels beyond the partition's name
    # Its devices (and their units) the health decider took out of service:
    # its raylet serves the others (`serving`); `device_ids`/`core_ids` stay
    # the partition as planned, to which it returns.
    out: tuple[str, ...] = ()
    out_core_ids: tuple[int, ...] = ()
    health: PartitionState = field(default_factory=PartitionState)  # its state by the health decider

    @property
    def partition(self) -> Partition:
        """The partition as planned, every device in it."""
        return Partition(self.name, self.device_ids, self.core_ids, self.accelerator_type, self.models)

    @property
    def serving(self) -> Partition:
        """The partition as its raylet serves it: without the devices out of service."""
        return self.partition.less(self.out, self.out_core_ids)

    @property
    def visible_ids(self) -> str:
        return format_visible_ids(self.serving.core_ids)

    @property
    def held(self) -> bool:
        """The decider drains, stops or restarts it on purpose: its raylet's
        end is not a failure, and only the decider brings it back."""
        return self.health.state in (PartState.DRAINING, PartState.RESTORING, PartState.STOPPED)

    def of_kind(self, *kinds: str) -> list[RayProcess]:
        return [p for p in self.processes if p.kind in kinds]

    def raylet(self) -> RayProcess | None:
        found = self.of_kind("raylet")
        return found[0] if found else None

    def to_json(self) -> dict[str, object]:
        fields = dump_fields(self, labels=dict(self.labels))
        del fields["name"]  # the planned part first, as `plan --json` writes it: `partition`
        return {**self.partition.to_json(), **fields}


@dataclass(frozen=True, kw_only=True)
class Spare:
    """Devices no partition serves because a host change could not start the
    partition planned for them (`status` lists them unassigned), with the
    share of the host that partition had: the next repartition may plan them
    and divides that share again."""

    device_ids: tuple[str, ...]
    core_ids: tuple[int, ...]
    share: Share
    reason: str


# The kinds of host change (`HostChange.kind`).
CHANGE_KINDS = ("repartition", "shrink", "return")


@dataclass(frozen=True, kw_only=True)
class HostChange:
    """A change of the host's raylets under way, written to the record before
    each of its steps is taken (`ray_accel.hostops.steps`), so that a crash
    at any step leaves a record from which `start --recover` finishes it.

    `touched`: the partitions it drains and stops (still in `partitions`
    until the partition that takes their devices enters). `target`: the
    partitions it starts, planned whole (devices, share, ports, labels); each
    leaves `target` as it enters `partitions`. `owner`: the process running
    it (a repartition's helper, or the decider): while it lives nobody else
    finishes the change."""

    kind: str
    step: str  # the step written last: taken, or about to be
    since: float
    owner: RayProcess | None = None
    touched: tuple[str, ...] = ()
    target: tuple[PartitionEntry, ...] = ()
    deadline: float | None = None  # when a drained partition's raylet is stopped, at the latest
    mode: str | None = None  # the host's mode once it is done


@dataclass(frozen=True, kw_only=True)
class HostRecord:
    """What `start` started on one host. The host is its name (as a file
    name: `statedir.host_name`) and the node IP its raylets use; `host_ip` is
    None only in a record of an earlier version, which had the name alone."""

    host: str
    host_ip: str | None
    created: float
    head: bool
    mode: str
    spec: BridgeSpec
    ray_args: tuple[str, ...]
    gcs_address: str
    gcs_port: int | None
    auth: Auth
    partitions: tuple[PartitionEntry, ...]
    metrics: bool | None = None
    labels: tuple[tuple[str, str], ...] = ()  # the user's --labels, on every partition
    dashboard_url: str | None = None
    cpu_pinning: str | None = None  # "on", or "off: <why>"
    inherited_mask: MaskView | None = None  # the mask set before start, as plan shows it
    # Set by `stop` before its first signal, so a `start --block` watching
    # these partitions knows their end was asked for.
    stopping: bool = False
    health: HealthSettings | None = None  # the decider's settings (None: a record from before)
    decider: RayProcess | None = None  # the host's health decider, while it runs
    repartition: RayProcess | None = None  # a running repartition's helper
    # A head's own raylet (GCS, dashboard, drivers): no devices, named HEAD.
    head_raylet: PartitionEntry | None = None
    # The start's terms a host change plans with, beside `ray_args`, `labels`,
    # `inherited_mask` and `health`: the user's --port-base, --max-workers and
    # the host's custom --resources (divided between partitions).
    port_base: int | None = None
    max_workers: int | None = None
    resources: tuple[tuple[str, float], ...] = ()
    change: HostChange | None = None
    unassigned: tuple[Spare, ...] = ()

    def raylets(self) -> list[PartitionEntry]:
        """Every raylet of this host: the partitions', then the head's."""
        return [*self.partitions, *([self.head_raylet] if self.head_raylet else [])]

    def processes(self) -> list[RayProcess]:
        """Every recorded process: the raylets', and the helpers'."""
        return [r for p in self.raylets() for r in p.processes] + self.helpers()

    def helpers(self) -> list[RayProcess]:
        """The host's helper processes it names: its processes that are no raylet's."""
        return [h for h in (self.decider, self.repartition) if h is not None]

    def partition(self, name: str) -> PartitionEntry | None:
        return next((p for p in self.partitions if p.name == name), None)

    def in_change(self, name: str) -> bool:
        """Whether a host change under way drains, stops or starts partition `name`."""
        change = self.change
        return change is not None and (name in change.touched or any(t.name == name for t in change.target))

    @property
    def legacy(self) -> bool:
        """A record of an earlier version (no node IP)."""
        return self.host_ip is None

    def with_partitions(self, parts: Sequence[PartitionEntry]) -> HostRecord:
        return replace(self, partitions=tuple(parts))

    def replacing(self, new: PartitionEntry) -> HostRecord:
        """This record with `new` in the place of the partition of its name."""
        return self.with_partitions([new if q.name == new.name else q for q in self.partitions])

    def state_of(self, p: PartitionEntry) -> PartitionState:
        """`p`'s state by the decider: one the decider never moved serves since the start."""
        return p.health if p.health.since else replace(p.health, since=self.created)


def dumps(record: HostRecord) -> str:
    # A record read from an earlier version's file is written back in its
    # own version (`stop` marks it stopping), which that version can read.
    spec = dump_fields(record.spec)
    change = record.change
    data = {
        "version": LEGACY_VERSION if record.legacy else VERSION,
        **dump_fields(
            record,
            spec={k: v for k, v in spec.items() if k not in ("backend", "traits")} if record.legacy else spec,
            labels=dict(record.labels),
            partitions=[p.to_json() for p in record.partitions],
            head_raylet=record.head_raylet and record.head_raylet.to_json(),
            resources=dict(record.resources),
            change=None if change is None else dump_fields(change, target=[t.to_json() for t in change.target]),
        ),
    }
    if record.legacy:
        for key in ("host_ip", "port_base", "max_workers", "resources", "change", "unassigned"):
            del data[key]
    return json.dumps(data, indent=2, allow_nan=False)


# ---------------------------------------------------------------- upgrades

# One older shape of the record: the raw record (its JSON object, at a
# `Cursor`) to the record one shape on, or None where the record is not of its
# shape. An upgrade checks only what it reads (an earlier `decider_state`);
# whatever does not fit is left as it is, for the parser to refuse naming it.
Upgrade = Callable[[Cursor], Cursor | None]


@dataclass(frozen=True)
class Upgraded:
    """A record in the current shape (`record`, raw JSON for the one
    parser), whether it came from a version-3 record (`legacy`: `dumps`
    writes it back as 3), and the names of the upgrades that changed it, in
    order."""

    record: Cursor
    legacy: bool
    applied: tuple[str, ...]


def upgrade(obj: Cursor) -> Upgraded:
    """The record at `obj` brought to the current shape by the upgrades of
    its version and of every version after it (`UPGRADES`); a version this
    ray-accel does not read is a `ReadError` naming it."""
    version = obj.mapping().get("version")
    if version not in READS or isinstance(version, bool):
        newer = isinstance(version, int) and version > VERSION
        raise ReadError(
            f"{show(version)}; this ray-accel reads versions {READS[0]} to {VERSION}"
            + (" (a newer ray-accel wrote it: use that version)" if newer else "")
            + " (stop that version's processes with the ray-accel that wrote it, or by hand, then remove the file)",
            "version",
        )
    current, applied = obj, []
    for older in range(version, VERSION):
        for step in UPGRADES[older]:
            changed = step(current)
            if changed is not None:
                current = changed
                applied.append(step.__name__)
    return Upgraded(current, version == LEGACY_VERSION, tuple(applied))


def _like(obj: Cursor, data: object) -> Cursor:
    """`data` where `obj` was: a refusal names the same path."""
    return Cursor(data, obj.path, obj.style)


def _each_entry(obj: Cursor, change: Callable[[Cursor], Cursor | None]) -> Cursor | None:
    """The record with `change` applied to each partition entry that is an
    object, and to its head raylet's (an upgrade of a partition's shape
    applies to both); None where it changed none."""
    data = dict(obj.mapping())
    changed = False
    listed = obj.at("partitions", None)
    if isinstance(listed.data, list):
        partitions: list[object] = []
        for entry in listed.list(MAX_PARTITIONS):
            new = change(entry) if isinstance(entry.data, dict) else None
            partitions.append(entry.data if new is None else new.data)
            changed = changed or new is not None
        data["partitions"] = partitions
    head = obj.at("head_raylet", None)
    if isinstance(head.data, dict):
        new = change(head)
        if new is not None:
            data["head_raylet"] = new.data
            changed = True
    return _like(obj, data) if changed else None


def _missing(obj: Cursor, defaults: Mapping[str, object]) -> Cursor | None:
    """The object at `obj` with each key of `defaults` it lacks set to its
    default; None where it lacks none."""
    data = obj.mapping()
    absent = {key: value for key, value in defaults.items() if key not in data}
    return _like(obj, {**data, **absent}) if absent else None


def _v3_node_json_to_v4(obj: Cursor) -> Cursor | None:
    """Version 3 (`node.json`, an earlier ray-accel's: no node IP, read as
    `legacy`): its spec names no backend and carries no traits; read as
    LEGACY_BACKEND with default traits (and written back without them)."""
    spec = obj.at("spec").data
    if not isinstance(spec, dict):
        return None
    legacy_spec = {**spec, "backend": LEGACY_BACKEND, "traits": dump(DeviceTraits())}
    return _like(obj, {**obj.mapping(), "version": 4, "spec": legacy_spec})


def _v4_decider_state_to_health(obj: Cursor) -> Cursor | None:
    """The decider as first written kept a partition's `decider_state`, not
    its `health`: "stopped" is STOPPED; "restarting" (a decider that died
    mid-restart, its raylet perhaps gone) is read as STOPPED too, so neither
    `--recover` nor the decider takes it for serving: the decider restarts
    it once its devices are healthy. A null one is serving."""

    def to_health(entry: Cursor) -> Cursor | None:
        data = entry.mapping()
        if "decider_state" not in data or "health" in data:
            return None
        old = _opt(
            entry.at("decider_state"),
            lambda n: n.one_of(DECIDER_STATES, f"{{value}} is not one of {', '.join(DECIDER_STATES)} or null"),
        )
        state = PartitionState()
        if old is not None:
            state = PartitionState(PartState.STOPPED, detail=f"{old} by an earlier decider")
        kept = {key: value for key, value in data.items() if key != "decider_state"}
        return _like(entry, {**kept, "health": dump(state)})

    return _each_entry(obj, to_health)


def _v4_before_decider(obj: Cursor) -> Cursor | None:
    """A record from before the health decider: no decider settings or
    process, and partitions with no devices out of service, serving."""
    entries = _each_entry(
        obj, lambda entry: _missing(entry, {"out": [], "out_core_ids": [], "health": dump(PartitionState())})
    )
    record = obj if entries is None else entries
    top = _missing(record, {"health": None, "decider": None})
    return entries if top is None else top


def _v4_before_repartition(obj: Cursor) -> Cursor | None:
    """A record from before `ray-accel repartition`: no repartition helper."""
    return _missing(obj, {"repartition": None})


def _v4_before_head_raylet(obj: Cursor) -> Cursor | None:
    """A record from before the device-less head raylet: none, and on a
    head host its head partition (GCS and all) first in `partitions`, where
    it stays (`_record` reads it there)."""
    return _missing(obj, {"head_raylet": None})


def _v4_partition_without_share(obj: Cursor) -> Cursor | None:
    """Partitions from before shares, labels, models and types per
    partition: no share recorded, no labels or models of their own, and the
    host's accelerator type (as then)."""
    spec = obj.at("spec", None).data
    if not isinstance(spec, dict):
        return None
    host_type = spec.get("accelerator_type")
    return _each_entry(
        obj,
        lambda entry: _missing(entry, {"share": None, "labels": {}, "models": [], "accelerator_type": host_type}),
    )


def _v4_to_v5(obj: Cursor) -> Cursor | None:
    """Version 5 records the start's terms a host change plans with (none
    known for a 4), a host change under way (none) and the devices a change
    left unassigned (none)."""
    added = _missing(obj, {"port_base": None, "max_workers": None, "resources": {}, "change": None, "unassigned": []})
    record = obj if added is None else added
    return _like(obj, {**record.mapping(), "version": 5})


# The upgrades of each older version, in the order they apply: a version-3
# record goes through 3's, then 4's.
UPGRADES: Mapping[int, tuple[Upgrade, ...]] = MappingProxyType(
    {
        3: (_v3_node_json_to_v4,),
        4: (
            _v4_decider_state_to_health,
            _v4_before_decider,
            _v4_before_repartition,
            _v4_before_head_raylet,
            _v4_partition_without_share,
            _v4_to_v5,
        ),
    }
)


# ---------------------------------------------------------------- parsing


def parse_record(raw: bytes | str, source: str) -> HostRecord:
    """The record in `raw` (the bytes of the state file `source`), or
    `RecordError` naming `source` and what does not fit: a record of an
    older version through its upgrades (`upgrade`), then the one parser of
    the current shape."""
    return parse_document(raw, f"state file {source}", _upgraded_record, RecordError, "does not fit the state record")


def _upgraded_record(obj: Cursor) -> HostRecord:
    upgraded = upgrade(obj)
    return _record(upgraded.record, upgraded.legacy)


def _checked(node: Cursor, check: Callable[..., T], *args: object) -> T:
    """`check(*args)`, its `InputError` named at `node`."""
    try:
        return check(*args)
    except InputError as e:
        node.fail(str(e))


def _record(obj: Cursor, legacy: bool) -> HostRecord:
    """The record in the current shape (`legacy`: read from a version-3
    record, which names no node IP and no backend)."""
    spec = _spec(obj.at("spec"))
    head = obj.at("head").bool()
    listed = obj.at("partitions")
    parts = tuple(_partition(p, spec) for p in listed.list(MAX_PARTITIONS))
    if not parts and not head:
        listed.fail("empty: a record names at least one partition")
    names = [p.name for p in parts]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        listed.fail(f"partition {dup!r} appears twice")
    mode = obj.at("mode").one_of([m.value for m in Mode], "{value} is not a partition mode")
    cores = [c for p in parts for c in p.core_ids]
    shared = next((c for i, c in enumerate(cores) if c in cores[:i]), None)
    # SHARED gives every partition every device on purpose; any other mode never shares a unit.
    if shared is not None and mode != "shared":
        listed.fail(f"core {shared} belongs to two partitions")
    # A record from before the head raylet may have its head partition first:
    # read so in a version 4, and kept so in the version 5 that `stop` or
    # `start --recover` writes back from it.
    if [i for i, p in enumerate(parts) if p.head] not in ([[], [0]] if head else [[]]):
        listed.fail("the head partition must be the first, and only in a record of a head")
    auth_node, args_node, address = obj.at("auth"), obj.at("ray_args"), obj.at("gcs_address")
    auth = _checked(auth_node, lambda: Auth.from_json(auth_node.mapping()))
    ray_args = args_node.texts(MAX_TEXT, 256)
    # Checked as `start` checks them: `--recover` passes them to `ray start` again.
    _checked(args_node, validate_ray_args, ray_args)
    gcs_host, gcs_port = _checked(address, validate.host_port, address.text(300), address.path)
    if auth.token_path is not None:
        Cursor(auth.token_path, "auth.token_path").text(MAX_TEXT)
    return HostRecord(
        host=obj.at("host").text(255),
        host_ip=None if legacy else _ip(obj.at("host_ip")),
        created=obj.at("created").number(0.0, 1e12),
        head=head,
        mode=mode,
        spec=spec,
        ray_args=ray_args,
        gcs_address=f"{gcs_host}:{gcs_port}",
        gcs_port=_opt(obj.at("gcs_port", None), lambda n: n.int(1, 65535)),
        auth=auth,
        partitions=parts,
        metrics=_opt(obj.at("metrics", None), lambda n: n.bool("{value} is not true, false or null")),
        labels=_labels(obj.at("labels", None)),
        dashboard_url=_opt(obj.at("dashboard_url", None), lambda n: n.text(512)),
        cpu_pinning=_opt(obj.at("cpu_pinning", None), lambda n: n.text(MAX_TEXT)),
        inherited_mask=_opt(obj.at("inherited_mask", None), lambda n: reader.load(MaskView, n.data, n.path)),
        stopping=obj.at("stopping", False).bool(),
        health=_opt(obj.at("health"), lambda n: HealthSettings.from_json(n.data, n.path)),
        decider=_opt(obj.at("decider"), lambda n: _helper(n, DECIDER_KIND)),
        repartition=_opt(obj.at("repartition"), lambda n: _helper(n, REPARTITION_KIND)),
        head_raylet=_opt(obj.at("head_raylet"), lambda n: _partition(n, spec, head=True)),
        port_base=_opt(obj.at("port_base"), lambda n: n.int(1024, 65535)),
        max_workers=_opt(obj.at("max_workers"), lambda n: n.int(1, 1 << 20)),
        resources=_amounts(obj.at("resources")),
        change=_opt(obj.at("change"), lambda n: _change(n, spec)),
        unassigned=tuple(_spare(n) for n in obj.at("unassigned").list(MAX_PARTITIONS)),
    )


def _amounts(node: Cursor) -> tuple[tuple[str, float], ...]:
    amounts = Cursor(node.data or {}, node.path)
    return tuple((k, v.number(0.0, 1e15)) for k, v in amounts.items(256))


def _change(obj: Cursor, spec: BridgeSpec) -> HostChange:
    return HostChange(
        kind=obj.at("kind").one_of(CHANGE_KINDS),
        step=obj.at("step").text(128),
        since=obj.at("since").number(0.0, 1e12),
        owner=_opt(obj.at("owner", None), _process),
        touched=obj.at("touched", []).texts(63, MAX_PARTITIONS),
        target=tuple(_partition(t, spec) for t in obj.at("target", []).list(MAX_PARTITIONS)),
        deadline=_opt(obj.at("deadline", None), lambda n: n.number(0.0, 1e12)),
        mode=_opt(obj.at("mode", None), lambda n: n.one_of([m.value for m in Mode])),
    )


def _spare(obj: Cursor) -> Spare:
    return Spare(
        device_ids=obj.at("device_ids").texts(256, MAX_UNITS),
        core_ids=_units(obj.at("core_ids")),
        share=_share(obj.at("share")),
        reason=obj.at("reason").text(MAX_TEXT),
    )


def _opt(node: Cursor, read: Callable[[Cursor], T]) -> T | None:
    return None if node.data is None else read(node)


def _helper(node: Cursor, kind: str) -> RayProcess:
    proc = _process(node)
    if proc.kind != kind:
        node.at("kind").fail(f"{proc.kind!r}: the {node.path.rsplit('.', 1)[-1]}'s kind is {kind!r}")
    return proc


def _labels(node: Cursor) -> tuple[tuple[str, str], ...]:
    labels = Cursor(node.data or {}, node.path)
    for key, value in labels.items(256):
        try:
            validate.label_key(key, labels.path)
            validate.label_value(value.text(63), key, labels.path)
        except InputError as e:
            labels.fail(str(e))
    return tuple((str(k), str(v)) for k, v in labels.mapping().items())


def _share(obj: Cursor) -> Share:
    cpu_set = obj.at("cpu_set", None).optional()
    return Share(
        partition=obj.at("partition").text(63),
        cpus=obj.at("cpus").int(0, 1 << 20),
        memory=obj.at("memory").int(0, 1 << 62),
        object_store_memory=obj.at("object_store_memory").int(0, 1 << 62),
        resources={
            Cursor(k, f"{obj.path}.resources").text(128): v.number(0.0, 1e15)
            for k, v in Cursor(obj.at("resources", None).data or {}, f"{obj.path}.resources").items(256)
        },
        cpu_set=None if cpu_set is None else tuple(c.int(0, 1 << 16) for c in cpu_set.list(1 << 16)),
        pin_reason=_opt(obj.at("pin_reason", None), lambda n: n.text(MAX_TEXT)),
    )


def _units(node: Cursor) -> tuple[int, ...]:
    return tuple(c.int(0, MAX_UNITS) for c in node.list(MAX_UNITS))


def _partition(obj: Cursor, spec: BridgeSpec, head: bool = False) -> PartitionEntry:
    """A partition's entry, or with `head` the head raylet's (named HEAD, no devices)."""
    named = obj.at("partition")
    name = named.one_of([HEAD]) if head else _checked(named, validate.partition_name, named.text(63))
    device_ids = obj.at("device_ids").texts(256, 0 if head else MAX_UNITS)
    listed = obj.at("core_ids")
    core_ids = _units(listed)
    if not core_ids and not head:
        listed.fail("empty: a partition has at least one unit")
    unknown = sorted(set(core_ids) - set(spec.unit_ids))
    if unknown:
        listed.fail(f"unit {unknown[0]} is not one of the host's units")
    if len(set(core_ids)) != len(core_ids):
        listed.fail("a unit appears twice")
    out = obj.at("out").texts(256, MAX_UNITS)
    if set(out) - set(device_ids):
        obj.at("out").fail(f"device {sorted(set(out) - set(device_ids))[0]!r} is not one of the partition's")
    out_cores = _units(obj.at("out_core_ids"))
    if set(out_cores) - set(core_ids):
        obj.at("out_core_ids").fail(f"unit {sorted(set(out_cores) - set(core_ids))[0]} is not one of the partition's")
    return PartitionEntry(
        name=name,
        device_ids=device_ids,
        core_ids=core_ids,
        head=obj.at("head").bool(),
        ports=_ports(obj.at("ports")),
        processes=tuple(_process(p) for p in obj.at("processes").list(MAX_PROCESSES)),
        node_id=_opt(obj.at("node_id", None), lambda n: _matching(n, _HEX_ID, 128, "{value} is not a hex node id")),
        node_ip=_opt(obj.at("node_ip", None), lambda n: n.text(255)),
        log=_opt(obj.at("log", None), lambda n: n.text(MAX_TEXT)),
        accelerator_type=_opt(obj.at("accelerator_type"), lambda n: n.text(128)),
        share=_opt(obj.at("share"), _share),
        labels=_labels(obj.at("labels")),
        models=obj.at("models").texts(128, MAX_UNITS),
        out=out,
        out_core_ids=out_cores,
        health=reader.load(PartitionState, obj.at("health").data, obj.at("health").path),
    )


def parse_processes(data: object, where: str) -> tuple[RayProcess, ...]:
    """A list of recorded processes, or `ReadError` naming `where`."""
    return tuple(_process(p) for p in Cursor(data, where).list(MAX_PROCESSES))


def _process(obj: Cursor) -> RayProcess:
    return RayProcess(
        kind=_matching(obj.at("kind"), _KIND, 48, "{value} is not a process kind"),
        # PID 0 and negative PIDs name process groups to kill(2): never a process.
        pid=obj.at("pid").int(1, PID_MAX),
        start_ticks=obj.at("start_ticks").int(0, (1 << 63) - 1),
        identity=obj.at("identity").text(MAX_TEXT),
    )


def _matching(node: Cursor, pattern: re.Pattern[str], limit: int, message: str) -> str:
    text = node.text(limit)
    if not pattern.match(text):
        node.fail(message.format(value=show(text)))
    return text


def _ports(obj: Cursor) -> RayletPorts:
    named_node = obj.at("named")
    named = {key: value.int(1024, 65535) for key, value in named_node.only(NAMED).items()}
    for key in ("node_manager_port", "object_manager_port"):
        if key not in named:
            named_node.fail(f"no {key}")
    lo = obj.at("min_worker_port").int(1024, 65535)
    hi = obj.at("max_worker_port").int(lo, 65535)
    return RayletPorts(obj.at("base").int(1024, 65535), named, lo, hi)


def _spec(obj: Cursor) -> BridgeSpec:
    resource = _matching(obj.at("resource_name"), _RESOURCE, 128, "{value} is not a resource name")
    env = _matching(obj.at("visible_ids_env"), _ENV_NAME, 128, "{value} is not an environment variable name")
    family = _matching(obj.at("family"), _KIND, 64, "{value} is not a family name")
    backend = _matching(obj.at("backend"), _BACKEND, 64, "{value} is not a backend name")
    traits_node = obj.at("traits")
    traits = _checked(obj, lambda: DeviceTraits.from_json(traits_node.mapping()))
    return BridgeSpec(
        backend=backend,
        traits=traits,
        resource_name=resource,
        visible_ids_env=env,
        family=family,
        accelerator_type=_opt(obj.at("accelerator_type", None), lambda n: n.text(128)),
        unit_ids=_units(obj.at("unit_ids")),
        process_env=_process_env(obj.at("process_env", [])),
    )


def _process_env(node: Cursor) -> tuple[tuple[str, str], ...]:
    out = []
    for row in node.list(64):
        pair = row.list(2)
        if len(pair) != 2:
            row.fail("a [name, value] pair")
        out.append((_matching(pair[0], _ENV_NAME, 128, "{value} is not an environment variable name"), pair[1].text()))
    return tuple(out)


def _ip(node: Cursor) -> str:
    canonical = canonical_ip(node.text(64))
    if canonical is None:
        node.fail(f"{show(node.data)} is not an IP address")
    return canonical
