"""The state record: what `ray-accel start` started on this host, as a typed,
frozen value.

The file is input like any other: it may be truncated, hand-edited, copied
from another host, or written by another version. `parse_record` checks every
field before anything acts on it and raises `RecordError` (exit 2) naming the
file and the field; nothing else escapes it, whatever the bytes. A PID from
the record is only a claim: `ray_accel.cluster.procs` decides whether the
process it names is still the one recorded.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, TypeVar

from ray_accel.bridge.managers import BridgeSpec
from ray_accel.cluster.auth import Auth, AuthError
from ray_accel.cluster.ports import NAMED, RayletPorts
from ray_accel.cluster.startargs import validate_ray_args
from ray_accel.core import validate
from ray_accel.core.errors import InputError
from ray_accel.core.health_state import HealthFileError, HealthSettings
from ray_accel.core.hosts import canonical_ip
from ray_accel.core.processes import ProcessRecord
from ray_accel.core.visibility import format_visible_ids
from ray_accel.partition.plan import Mode, Partition
from ray_accel.partition.share import Share
from ray_accel.plugins.traits import DeviceTraits

# 4 (read without them too): the health decider's settings and process, and
# per partition its devices out of service and the decider's hold on it.
# 4: the host's node IP beside its name (`host_ip`), in `host.json`; the
# spec names its backend and carries its traits.
# 3 (`node.json`, an earlier ray-accel's): processes as {kind, pid,
# start_ticks, identity}, the host's name, ports per partition; read so that
# `stop` can stop what it names (2 had [pid, start ticks] pairs; 1 had
# wall-clock start times). Its spec names no backend and no traits: read as
# LEGACY_BACKEND with default traits, and written back without them.
VERSION = 4
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
# What the decider says of a partition whose raylet it stopped on purpose, or
# is restarting under the host's lock: a dead raylet there is not a failure.
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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
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
    decider_state: str | None = None  # one of DECIDER_STATES, or None

    @property
    def partition(self) -> Partition:
        """The partition as planned, every device in it."""
        return Partition(self.name, self.device_ids, self.core_ids, self.accelerator_type, self.models)

    @property
    def serving(self) -> Partition:
        """The partition as its raylet serves it: without the devices out of service."""
        return Partition(
            self.name,
            tuple(d for d in self.device_ids if d not in self.out),
            tuple(c for c in self.core_ids if c not in self.out_core_ids),
            self.accelerator_type,
            self.models,
        )

    @property
    def visible_ids(self) -> str:
        return format_visible_ids(self.serving.core_ids)

    def of_kind(self, *kinds: str) -> list[RayProcess]:
        return [p for p in self.processes if p.kind in kinds]

    def raylet(self) -> RayProcess | None:
        found = self.of_kind("raylet")
        return found[0] if found else None

    def to_json(self) -> dict[str, Any]:
        return {
            **self.partition.to_json(),  # the planned part, as `plan --json` writes it
            "share": None if self.share is None else self.share.to_json(),
            "labels": dict(self.labels),
            "head": self.head,
            "ports": asdict(self.ports),
            "processes": [p.to_json() for p in self.processes],
            "node_id": self.node_id,
            "node_ip": self.node_ip,
            "log": self.log,
            "out": list(self.out),
            "out_core_ids": list(self.out_core_ids),
            "decider_state": self.decider_state,
        }


@dataclass(frozen=True)
class HostRecord:
    """What `start` started on one host. The host is its name (as a file
    name: `state.host_name`) and the node IP its raylets use; `host_ip` is
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
    inherited_mask: Mapping[str, object] | None = None  # the mask set before start, as plan shows it
    # Set by `stop` before its first signal, so a `start --block` watching
    # these partitions knows their end was asked for.
    stopping: bool = False
    health: HealthSettings | None = None  # the decider's settings (None: a record from before)
    decider: RayProcess | None = None  # the host's health decider, while it runs

    def processes(self) -> list[RayProcess]:
        """Every recorded process: the partitions', and the decider's."""
        own = [r for p in self.partitions for r in p.processes]
        return own if self.decider is None else [*own, self.decider]

    @property
    def legacy(self) -> bool:
        """A record of an earlier version (no node IP)."""
        return self.host_ip is None

    def with_partitions(self, parts: Sequence[PartitionEntry]) -> HostRecord:
        return replace(self, partitions=tuple(parts))

    def _spec_json(self) -> dict[str, Any]:
        spec = self.spec.to_json()
        if self.legacy:
            spec = {k: v for k, v in spec.items() if k not in ("backend", "traits")}
        return spec

    def to_json(self) -> dict[str, Any]:
        # A record read from an earlier version's file is written back in its
        # own version (`stop` marks it stopping), which that version can read.
        ip = {} if self.host_ip is None else {"host_ip": self.host_ip}
        return {
            "version": LEGACY_VERSION if self.host_ip is None else VERSION,
            "host": self.host,
            **ip,
            "created": self.created,
            "head": self.head,
            "mode": self.mode,
            "spec": self._spec_json(),
            "ray_args": list(self.ray_args),
            "gcs_address": self.gcs_address,
            "gcs_port": self.gcs_port,
            "auth": self.auth.to_json(),
            "metrics": self.metrics,
            "labels": dict(self.labels),
            "dashboard_url": self.dashboard_url,
            "cpu_pinning": self.cpu_pinning,
            "inherited_mask": None if self.inherited_mask is None else dict(self.inherited_mask),
            "stopping": self.stopping,
            "health": None if self.health is None else self.health.to_json(),
            "decider": None if self.decider is None else self.decider.to_json(),
            "partitions": [p.to_json() for p in self.partitions],
        }


def dumps(record: HostRecord) -> str:
    return json.dumps(record.to_json(), indent=2, allow_nan=False)


# ---------------------------------------------------------------- parsing


class _Bad(Exception):
    """A field that does not fit, with where it is."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}" if where else problem)


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def loads_json(raw: bytes | str) -> object:
    """Strict JSON: no NaN or Infinity, no duplicate surprises from deep
    nesting (a RecursionError is reported like any other syntax error)."""
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    return json.loads(text, parse_constant=_reject_constant)


def parse_record(raw: bytes | str, source: str) -> HostRecord:
    """The record in `raw` (the bytes of the state file `source`), or
    `RecordError` naming `source` and what does not fit."""
    try:
        data = loads_json(raw)
    except UnicodeDecodeError as e:
        raise RecordError(f"state file {source} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except RecursionError:
        raise RecordError(f"state file {source} is not a state record: JSON nested too deeply") from None
    except ValueError as e:
        raise RecordError(f"state file {source} is not valid JSON: {e}") from None
    try:
        return _record(data)
    except _Bad as e:
        raise RecordError(f"state file {source} does not fit the state record: {e}") from None
    except RecursionError:  # pragma: no cover - the schema has a fixed depth
        raise RecordError(f"state file {source} does not fit the state record: nested too deeply") from None


def _record(data: object) -> HostRecord:
    obj = _mapping(data, "")
    version = obj.get("version")
    if version not in (VERSION, LEGACY_VERSION) or isinstance(version, bool):
        raise _Bad(
            "version",
            f"{_show(version)}; this ray-accel reads versions {LEGACY_VERSION} and {VERSION} (stop that version's "
            "processes with the ray-accel that wrote it, or by hand, then remove the file)",
        )
    spec = _spec(_key(obj, "spec", ""), legacy=version == LEGACY_VERSION)
    head = _bool(_key(obj, "head", ""), "head")
    parts_raw = _list(_key(obj, "partitions", ""), "partitions", MAX_PARTITIONS)
    if not parts_raw:
        raise _Bad("partitions", "empty: a record names at least one partition")
    parts = tuple(_partition(p, f"partitions[{i}]", spec) for i, p in enumerate(parts_raw))
    names = [p.name for p in parts]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise _Bad("partitions", f"partition {dup!r} appears twice")
    mode = _mode(_key(obj, "mode", ""))
    cores = [c for p in parts for c in p.core_ids]
    shared = _first_dup(cores)
    # SHARED gives every partition every device on purpose; any other mode never shares a unit.
    if shared is not None and mode != "shared":
        raise _Bad("partitions", f"core {shared} belongs to two partitions")
    heads = [i for i, p in enumerate(parts) if p.head]
    if heads != ([0] if head else []):
        raise _Bad("partitions", "the head partition must be the first, and only in a record of a head")
    gcs_port = obj.get("gcs_port")
    try:
        auth = Auth.from_json(_mapping(_key(obj, "auth", ""), "auth"))
    except AuthError as e:
        raise _Bad("auth", str(e)) from None
    if auth.token_path is not None:
        _text(auth.token_path, "auth.token_path", MAX_TEXT)
    metrics = obj.get("metrics")
    if metrics is not None and not isinstance(metrics, bool):
        raise _Bad("metrics", f"{_show(metrics)} is not true, false or null")
    return HostRecord(
        host=_text(_key(obj, "host", ""), "host", 255),
        host_ip=None if version == LEGACY_VERSION else _ip(_key(obj, "host_ip", ""), "host_ip"),
        created=_number(_key(obj, "created", ""), "created", 0.0, 1e12),
        head=head,
        mode=mode,
        spec=spec,
        ray_args=_ray_args(_key(obj, "ray_args", "")),
        gcs_address=_address(_key(obj, "gcs_address", ""), "gcs_address"),
        gcs_port=None if gcs_port is None else _int(gcs_port, "gcs_port", 1, 65535),
        auth=auth,
        partitions=parts,
        metrics=metrics,
        labels=_labels(obj.get("labels") or {}),
        dashboard_url=_optional(obj.get("dashboard_url"), "dashboard_url", lambda v, w: _text(v, w, 512)),
        cpu_pinning=_optional(obj.get("cpu_pinning"), "cpu_pinning", lambda v, w: _text(v, w, MAX_TEXT)),
        inherited_mask=_optional(obj.get("inherited_mask"), "inherited_mask", _mask),
        stopping=_bool(obj.get("stopping", False), "stopping"),
        health=_optional(obj.get("health"), "health", _health_settings),
        decider=_optional(obj.get("decider"), "decider", _decider),
    )


def _health_settings(data: object, where: str) -> HealthSettings:
    try:
        return HealthSettings.from_json(data, where)
    except HealthFileError as e:
        raise _Bad(where, str(e)) from None


def _decider(data: object, where: str) -> RayProcess:
    proc = _process(data, where)
    if proc.kind != DECIDER_KIND:
        raise _Bad(f"{where}.kind", f"{proc.kind!r}: the decider's kind is {DECIDER_KIND!r}")
    return proc


def _labels(data: object, where: str = "labels") -> tuple[tuple[str, str], ...]:
    obj = _mapping(data, where)
    if len(obj) > 256:
        raise _Bad(where, f"{len(obj)} labels; at most 256")
    for k, v in obj.items():
        try:
            validate.label_key(k, where)
            validate.label_value(_text(v, f"{where}.{k}", 63), k, where)
        except InputError as e:
            raise _Bad(where, str(e)) from None
    return tuple((str(k), str(v)) for k, v in obj.items())


def _mask(data: object, where: str) -> Mapping[str, object]:
    obj = _mapping(data, where)
    _text(_key(obj, "description", where), f"{where}.description", MAX_TEXT)
    if len(json.dumps(obj)) > MAX_TEXT * 16:
        raise _Bad(where, "too large")
    return obj


def _share(data: object, where: str) -> Share:
    obj = _mapping(data, where)
    cpu_set = obj.get("cpu_set")
    resources = _mapping(obj.get("resources") or {}, f"{where}.resources")
    if len(resources) > 256:
        raise _Bad(f"{where}.resources", "more than 256 resources")
    return Share(
        partition=_text(_key(obj, "partition", where), f"{where}.partition", 63),
        cpus=_int(_key(obj, "cpus", where), f"{where}.cpus", 0, 1 << 20),
        memory=_int(_key(obj, "memory", where), f"{where}.memory", 0, 1 << 62),
        object_store_memory=_int(_key(obj, "object_store_memory", where), f"{where}.object_store_memory", 0, 1 << 62),
        resources={
            _text(k, f"{where}.resources", 128): _number(v, f"{where}.resources.{k}", 0.0, 1e15)
            for k, v in resources.items()
        },
        cpu_set=None
        if cpu_set is None
        else tuple(
            _int(c, f"{where}.cpu_set[{i}]", 0, 1 << 16)
            for i, c in enumerate(_list(cpu_set, f"{where}.cpu_set", 1 << 16))
        ),
        pin_reason=_optional(obj.get("pin_reason"), f"{where}.pin_reason", lambda v, w: _text(v, w, MAX_TEXT)),
    )


def _first_dup(values: Sequence[int]) -> int | None:
    seen: set[int] = set()
    for v in values:
        if v in seen:
            return v
        seen.add(v)
    return None


def _partition(data: object, where: str, spec: BridgeSpec) -> PartitionEntry:
    obj = _mapping(data, where)
    name = _text(_key(obj, "partition", where), f"{where}.partition", 63)
    try:
        validate.partition_name(name)
    except InputError as e:
        raise _Bad(f"{where}.partition", str(e)) from None
    device_ids = tuple(
        _text(d, f"{where}.device_ids[{i}]", 256)
        for i, d in enumerate(_list(_key(obj, "device_ids", where), f"{where}.device_ids", MAX_UNITS))
    )
    core_list = _list(_key(obj, "core_ids", where), f"{where}.core_ids", MAX_UNITS)
    core_ids = tuple(_int(c, f"{where}.core_ids[{i}]", 0, MAX_UNITS) for i, c in enumerate(core_list))
    if not core_ids:
        raise _Bad(f"{where}.core_ids", "empty: a partition has at least one unit")
    unknown = sorted(set(core_ids) - set(spec.unit_ids))
    if unknown:
        raise _Bad(f"{where}.core_ids", f"unit {unknown[0]} is not one of the host's units")
    if len(set(core_ids)) != len(core_ids):
        raise _Bad(f"{where}.core_ids", "a unit appears twice")
    procs_list = _list(_key(obj, "processes", where), f"{where}.processes", MAX_PROCESSES)
    processes = tuple(_process(p, f"{where}.processes[{i}]") for i, p in enumerate(procs_list))
    out = tuple(
        _text(d, f"{where}.out[{i}]", 256) for i, d in enumerate(_list(obj.get("out", []), f"{where}.out", MAX_UNITS))
    )
    if set(out) - set(device_ids):
        raise _Bad(f"{where}.out", f"device {sorted(set(out) - set(device_ids))[0]!r} is not one of the partition's")
    out_cores = tuple(
        _int(c, f"{where}.out_core_ids[{i}]", 0, MAX_UNITS)
        for i, c in enumerate(_list(obj.get("out_core_ids", []), f"{where}.out_core_ids", MAX_UNITS))
    )
    if set(out_cores) - set(core_ids):
        raise _Bad(
            f"{where}.out_core_ids", f"unit {sorted(set(out_cores) - set(core_ids))[0]} is not one of the partition's"
        )
    held = obj.get("decider_state")
    if held is not None and held not in DECIDER_STATES:
        raise _Bad(f"{where}.decider_state", f"{_show(held)} is not one of {', '.join(DECIDER_STATES)} or null")
    return PartitionEntry(
        name=name,
        device_ids=device_ids,
        core_ids=core_ids,
        head=_bool(_key(obj, "head", where), f"{where}.head"),
        ports=_ports(_key(obj, "ports", where), f"{where}.ports"),
        processes=processes,
        node_id=_optional(obj.get("node_id"), f"{where}.node_id", _hex_id),
        node_ip=_optional(obj.get("node_ip"), f"{where}.node_ip", lambda v, w: _text(v, w, 255)),
        log=_optional(obj.get("log"), f"{where}.log", lambda v, w: _text(v, w, MAX_TEXT)),
        # A record from before types per partition: the host's type, as then.
        accelerator_type=_optional(
            obj.get("accelerator_type", spec.accelerator_type),
            f"{where}.accelerator_type",
            lambda v, w: _text(v, w, 128),
        ),
        share=_optional(obj.get("share"), f"{where}.share", _share),
        labels=_labels(obj.get("labels") or {}, f"{where}.labels"),
        models=tuple(
            _text(m, f"{where}.models[{i}]", 128)
            for i, m in enumerate(_list(obj.get("models", []), f"{where}.models", MAX_UNITS))
        ),
        out=out,
        out_core_ids=out_cores,
        decider_state=held if isinstance(held, str) else None,
    )


def parse_processes(data: object, where: str) -> tuple[RayProcess, ...]:
    """A list of recorded processes, or InputError naming `where`."""
    try:
        items = _list(data, where, MAX_PROCESSES)
        return tuple(_process(p, f"{where}[{i}]") for i, p in enumerate(items))
    except _Bad as e:
        raise InputError(str(e)) from None


def _process(data: object, where: str) -> RayProcess:
    obj = _mapping(data, where)
    kind = _text(_key(obj, "kind", where), f"{where}.kind", 48)
    if not _KIND.match(kind):
        raise _Bad(f"{where}.kind", f"{kind!r} is not a process kind")
    return RayProcess(
        kind=kind,
        # PID 0 and negative PIDs name process groups to kill(2): never a process.
        pid=_int(_key(obj, "pid", where), f"{where}.pid", 1, PID_MAX),
        start_ticks=_int(_key(obj, "start_ticks", where), f"{where}.start_ticks", 0, (1 << 63) - 1),
        identity=_text(_key(obj, "identity", where), f"{where}.identity", MAX_TEXT),
    )


def _ports(data: object, where: str) -> RayletPorts:
    obj = _mapping(data, where)
    named_raw = _mapping(_key(obj, "named", where), f"{where}.named")
    named: dict[str, int] = {}
    for key, value in named_raw.items():
        if key not in NAMED:
            raise _Bad(f"{where}.named", f"unknown port {key!r}")
        named[key] = _int(value, f"{where}.named.{key}", 1024, 65535)
    for key in ("node_manager_port", "object_manager_port"):
        if key not in named:
            raise _Bad(f"{where}.named", f"no {key}")
    lo = _int(_key(obj, "min_worker_port", where), f"{where}.min_worker_port", 1024, 65535)
    hi = _int(_key(obj, "max_worker_port", where), f"{where}.max_worker_port", lo, 65535)
    return RayletPorts(_int(_key(obj, "base", where), f"{where}.base", 1024, 65535), named, lo, hi)


def _spec(data: object, legacy: bool = False) -> BridgeSpec:
    obj = _mapping(data, "spec")
    resource = _text(_key(obj, "resource_name", "spec"), "spec.resource_name", 128)
    env = _text(_key(obj, "visible_ids_env", "spec"), "spec.visible_ids_env", 128)
    family = _text(_key(obj, "family", "spec"), "spec.family", 64)
    if not _RESOURCE.match(resource):
        raise _Bad("spec.resource_name", f"{resource!r} is not a resource name")
    if not _ENV_NAME.match(env):
        raise _Bad("spec.visible_ids_env", f"{env!r} is not an environment variable name")
    if not _KIND.match(family):
        raise _Bad("spec.family", f"{family!r} is not a family name")
    if legacy:
        backend, traits = LEGACY_BACKEND, DeviceTraits()
    else:
        backend = _text(_key(obj, "backend", "spec"), "spec.backend", 64)
        if not _BACKEND.match(backend):
            raise _Bad("spec.backend", f"{backend!r} is not a backend name")
        try:
            traits = DeviceTraits.from_json(_mapping(_key(obj, "traits", "spec"), "spec.traits"))
        except InputError as e:
            raise _Bad("spec", str(e)) from None
    units = _list(_key(obj, "unit_ids", "spec"), "spec.unit_ids", MAX_UNITS)
    accel = obj.get("accelerator_type")
    return BridgeSpec(
        backend=backend,
        traits=traits,
        resource_name=resource,
        visible_ids_env=env,
        family=family,
        accelerator_type=None if accel is None else _text(accel, "spec.accelerator_type", 128),
        unit_ids=tuple(_int(u, f"spec.unit_ids[{i}]", 0, MAX_UNITS) for i, u in enumerate(units)),
        process_env=_process_env(obj.get("process_env", [])),
    )


def _process_env(data: object) -> tuple[tuple[str, str], ...]:
    out = []
    for i, row in enumerate(_list(data, "spec.process_env", 64)):
        pair = _list(row, f"spec.process_env[{i}]", 2)
        if len(pair) != 2:
            raise _Bad(f"spec.process_env[{i}]", "a [name, value] pair")
        name = _text(pair[0], f"spec.process_env[{i}][0]", 128)
        if not _ENV_NAME.match(name):
            raise _Bad(f"spec.process_env[{i}][0]", f"{name!r} is not an environment variable name")
        out.append((name, _text(pair[1], f"spec.process_env[{i}][1]", MAX_TEXT)))
    return tuple(out)


def _ray_args(data: object) -> tuple[str, ...]:
    args = tuple(_text(a, f"ray_args[{i}]", MAX_TEXT) for i, a in enumerate(_list(data, "ray_args", 256)))
    # Checked as `start` checks them: `--recover` passes them to `ray start` again.
    try:
        validate_ray_args(args)
    except InputError as e:
        raise _Bad("ray_args", str(e)) from None
    return args


def _address(data: object, where: str) -> str:
    text = _text(data, where, 300)
    try:
        host, port = validate.host_port(text, where)
    except InputError as e:
        raise _Bad(where, str(e)) from None
    return f"{host}:{port}"


def _ip(data: object, where: str) -> str:
    text = _text(data, where, 64)
    canonical = canonical_ip(text)
    if canonical is None:
        raise _Bad(where, f"{_show(text)} is not an IP address")
    return canonical


def _mode(data: object) -> str:
    text = _text(data, "mode", 32)
    if text not in {m.value for m in Mode}:
        raise _Bad("mode", f"{text!r} is not a partition mode")
    return text


def _hex_id(data: object, where: str) -> str:
    text = _text(data, where, 128)
    if not _HEX_ID.match(text):
        raise _Bad(where, f"{text!r} is not a hex node id")
    return text


# ------------------------------------------------------------- primitives


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _key(obj: Mapping[str, object], key: str, where: str) -> object:
    if key not in obj:
        raise _Bad(where or "record", f"missing {key!r}")
    return obj[key]


def _mapping(data: object, where: str) -> Mapping[str, object]:
    if not isinstance(data, dict):
        raise _Bad(where or "record", f"expected an object, got {_type(data)}")
    return data


def _list(data: object, where: str, limit: int) -> list[object]:
    if not isinstance(data, list):
        raise _Bad(where, f"expected a list, got {_type(data)}")
    if len(data) > limit:
        raise _Bad(where, f"{len(data)} entries, more than {limit}")
    return data


def _text(data: object, where: str, limit: int) -> str:
    if not isinstance(data, str):
        raise _Bad(where, f"expected a string, got {_type(data)}")
    if not data or len(data) > limit:
        raise _Bad(where, f"expected 1 to {limit} characters, got {len(data)}")
    if any(ord(c) < 32 or ord(c) == 127 for c in data):
        raise _Bad(where, f"control character in {_show(data)}")
    return data


def _int(data: object, where: str, lo: int, hi: int) -> int:
    if not isinstance(data, int) or isinstance(data, bool):
        raise _Bad(where, f"expected an integer, got {_type(data)} {_show(data)}")
    if not lo <= data <= hi:
        raise _Bad(where, f"{_show(data)} is outside {lo}..{hi}")
    return data


def _number(data: object, where: str, lo: float, hi: float) -> float:
    if not isinstance(data, int | float) or isinstance(data, bool):
        raise _Bad(where, f"expected a number, got {_type(data)}")
    value = float(data)
    if not math.isfinite(value) or not lo <= value <= hi:
        raise _Bad(where, f"{_show(data)} is outside {lo:g}..{hi:g}")
    return value


def _bool(data: object, where: str) -> bool:
    if not isinstance(data, bool):
        raise _Bad(where, f"expected true or false, got {_type(data)} {_show(data)}")
    return data


def _optional(data: object, where: str, parse: Callable[[object, str], T]) -> T | None:
    return None if data is None else parse(data, where)


def _type(data: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer"}
    if data is None:
        return "null"
    return names.get(type(data), "a number" if isinstance(data, float) else type(data).__name__)
