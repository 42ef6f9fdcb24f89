"""Splitting one host's devices into partitions, one raylet each, and the
node labels each partition's raylet carries.

Modes:
- SHARED: every partition sees every device. Only for families whose backend
  declares their devices shareable (`DeviceTraits.shareable`: GPUs, with no
  memory isolation between the partitions); refused for the others (Neuron,
  where a core belongs to one process).
- AUTO_SPLIT: N partitions of equal size, devices ordered as the backend
  declares (`DeviceTraits.split`): INDEX_BLOCKS keeps whole devices together
  in consecutive index blocks, so each partition's core ids form one
  contiguous range aligned to its size (what multi-core Neuron jobs need)
  and, on Neuron's torus and ring, neighbouring devices; LOCALITY groups
  devices by NUMA node and link island first (GPUs and NVLink), then grows
  linked blocks. When N does not divide the device count the plan is
  refused: an uneven split would leave devices idle without anyone asking.
  A host of several models is split model by model: no partition holds two
  models, each model's devices are split evenly, and without a count there is
  one partition per model.
- MANUAL: explicit device indexes, ranges or ids per partition.

Honest types (beyond Ray 2.60, which types a node by its GPU 0): each
partition carries the accelerator type of its own devices. A partition whose
devices are of several types (SHARED or MANUAL over a mixed host) has none, so
its raylet advertises no `accelerator_type:<T>`, and the plan warns, naming
the models.

The labels: work can target a partition, and a placement policy can see what
it holds.

`label_selector={PARTITION_LABEL: "p0"}` picks partition p0 on any host;
adding `HOST_LABEL` picks it on one host. The host label's value is the host's
key (`ray_accel.core.hosts`): its name and the node IP Ray uses for its
raylets, `<name>_<ip>`, so two hosts that share a name are still two hosts. The topology labels (`DEVICES_LABEL`,
`CORES_LABEL`, `LINKS_LABEL`, `CONNECTED_LABEL`) tell a policy on any host
which devices and cores a remote partition holds and which devices of its host
they link to: Ray's own node table carries only counts.

Id sets are written as ranges joined by '_' (`0-3_8-11`): Ray's label values
allow only letters, digits, '-', '_' and '.', at most 63 characters
(`ray._private.label_utils.LABEL_REGEX`, Ray 2.60), and `ray start --labels`
splits on ','. A set whose text would be longer is left out, and readers treat
a missing label as "not known". A user's label or resource that ray-accel
sets itself on a partition's raylet is refused (`check_user_keys`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import itertools
import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ray_accel.core import ray_resources, validate
from ray_accel.core.devices import Device, DeviceId
from ray_accel.core.errors import InputError
from ray_accel.core.hosts import HostId, host_key
from ray_accel.core.reader import dump, dump_fields
from ray_accel.core.validate import LABEL_VALUE
from ray_accel.core.visibility import VisibilityError, format_visible_ids, parse_visible_ids
from ray_accel.plugins.traits import DeviceTraits, SplitOrder


class PartitionError(InputError):
    """A plan that cannot be made: overlap, unknown id, impossible split."""


class Mode(enum.StrEnum):
    SHARED = "shared"
    AUTO_SPLIT = "auto-split"
    MANUAL = "manual"

    @classmethod
    def parse(cls, value: str) -> Mode:
        """A mode as the user writes it (any case, `_` for `-`), or a `Mode`.
        An empty one is refused, never read as the default."""
        if not value.strip():
            raise PartitionError(f"empty mode {value!r}: use shared, auto-split or manual")
        try:
            return cls(value.strip().lower().replace("_", "-"))
        except ValueError:
            raise PartitionError(f"unknown mode {value!r}: use shared, auto-split or manual") from None


@dataclass(frozen=True)
class Quality:
    connected: bool | None  # None: the inventory has no topology to judge by
    contiguous: bool
    aligned: bool
    numa_nodes: tuple[int, ...]

    def describe(self) -> str:
        conn = "n/a" if self.connected is None else ("yes" if self.connected else "NO")
        return (
            f"connected={conn} contiguous={'yes' if self.contiguous else 'NO'} "
            f"aligned={'yes' if self.aligned else 'NO'} numa={','.join(map(str, self.numa_nodes))}"
        )


@dataclass(frozen=True)
class Partition:
    name: str
    device_ids: tuple[DeviceId, ...]
    core_ids: tuple[int, ...]
    # The one type this partition's raylet advertises (Ray's `accelerator_type:<T>`
    # resource and `ray.io/accelerator-type` label); None where its devices have
    # several types or none is known.
    accelerator_type: str | None = None
    models: tuple[str, ...] = ()  # its devices' models, each once, in index order

    def less(self, devices: Collection[str], units: Collection[int]) -> Partition:
        """This partition less `devices` and their `units`: what its raylet
        serves while they are out of service."""
        return dataclasses.replace(
            self,
            device_ids=tuple(d for d in self.device_ids if d not in devices),
            core_ids=tuple(c for c in self.core_ids if c not in units),
        )

    @property
    def visible_ids(self) -> str:
        """The mask as a comma list, the only form Ray 2.60 parses."""
        return format_visible_ids(self.core_ids)

    def to_json(self) -> dict[str, Any]:
        fields = dump_fields(self, visible_ids=self.visible_ids)
        return {"partition": fields.pop("name"), **fields}


@dataclass(frozen=True)
class MaskView:
    """A mask inherited from the environment, as `plan` shows it and the
    record keeps it; the fields are its JSON keys."""

    env: str
    value: str
    visible_ids: tuple[int, ...]
    devices: tuple[str, ...]
    description: str


@dataclass(frozen=True)
class Plan:
    mode: Mode
    partitions: tuple[Partition, ...]
    unassigned: tuple[DeviceId, ...]
    warnings: tuple[str, ...]
    quality: tuple[Quality, ...]
    # A mask inherited from the environment that the plan stays within
    # (`ray_accel.partition.inherited`); None when there is none.
    mask: MaskView | None = field(default=None, hash=False, compare=False)

    def __iter__(self) -> Iterator[Partition]:
        return iter(self.partitions)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode.value,
            "partitions": [
                dict(
                    p.to_json(), quality=q.describe(), connected=q.connected, contiguous=q.contiguous, aligned=q.aligned
                )
                for p, q in zip(self.partitions, self.quality, strict=True)
            ],
            "unassigned": list(self.unassigned),
            "warnings": list(self.warnings),
            "inherited_mask": dump(self.mask),
        }


def _linked(group: Sequence[Device]) -> bool:
    """Whether the link graph holds `group` in one island (one device always is)."""
    return len(set(_islands(group).values())) == 1


def assess(group: Sequence[Device], topology: bool) -> Quality:
    cores = sorted(c for d in group for c in d.core_ids)
    contiguous = bool(cores) and cores[-1] - cores[0] + 1 == len(cores)
    aligned = contiguous and cores[0] % len(cores) == 0
    numa = tuple(sorted({d.numa_node for d in group}))
    return Quality(_linked(group) if topology else None, contiguous, aligned, numa)


def models_of(devices: Sequence[Device]) -> tuple[str, ...]:
    """Each model once, in index order."""
    return tuple(dict.fromkeys(d.model for d in sorted(devices, key=lambda d: d.index)))


def group_type(group: Sequence[Device], default_type: str | None = None, host_models: int = 1) -> str | None:
    """The one accelerator type of `group`, or None if its devices have several.

    A device that names no type of its own has `default_type` (the host's, as
    its backend reports it) when the whole host is of one model; on a host of
    several models its type is unknown.
    """
    types = {d.accelerator_type or (default_type if host_models == 1 else None) for d in group}
    return types.pop() if len(types) == 1 else None


def _make(name: str, group: Sequence[Device], default_type: str | None = None, host_models: int = 1) -> Partition:
    ordered = sorted(group, key=lambda d: d.index)
    return Partition(
        name,
        tuple(d.id for d in ordered),
        tuple(sorted(c for d in ordered for c in d.core_ids)),
        group_type(ordered, default_type, host_models),
        models_of(ordered),
    )


def _islands(devices: Sequence[Device]) -> dict[DeviceId, int]:
    """Connected components of the link graph, numbered by lowest index."""
    by_id = {d.id: d for d in devices}
    island: dict[DeviceId, int] = {}
    for d in sorted(devices, key=lambda d: d.index):
        if d.id in island:
            continue
        n = len(set(island.values()))
        stack = [d.id]
        island[d.id] = n
        while stack:
            for p in by_id[stack.pop()].peers:
                if p in by_id and p not in island:
                    island[p] = n
                    stack.append(p)
    return island


def _grow(devices: Sequence[Device], size: int) -> list[list[Device]] | None:
    """Greedy connected groups: from the lowest free device, add free peers."""
    free = {d.id: d for d in devices}  # in the order given
    groups = []
    while free:
        group = [free.pop(next(iter(free)))]
        frontier = list(group[0].peers)
        while len(group) < size:
            nxt = sorted((free[p] for p in frontier if p in free), key=lambda d: (d.numa_node, d.index))
            if not nxt:
                return None
            group.append(free.pop(nxt[0].id))
            frontier.extend(nxt[0].peers)
        groups.append(group)
    return groups


def _auto_split(devices: Sequence[Device], count: int, split: SplitOrder) -> list[list[Device]]:
    if len(devices) % count:
        raise PartitionError(
            f"cannot split {len(devices)} devices evenly into {count} partitions: "
            f"use --partitions {', '.join(map(str, _divisors(len(devices))))}, or --mode manual"
        )
    size = len(devices) // count
    island = _islands(devices)
    by_index = split is SplitOrder.INDEX_BLOCKS
    order = sorted(devices, key=lambda d: (d.index,) if by_index else (d.numa_node, island[d.id], d.index))
    blocks = [order[i : i + size] for i in range(0, len(order), size)]
    if by_index or not any(d.peers for d in devices) or all(_linked(b) for b in blocks):
        return blocks
    return _grow(order, size) or blocks


def _by_model(devices: Sequence[Device]) -> list[list[Device]]:
    """The devices of each model, models in order of their first device."""
    groups: dict[str, list[Device]] = {}
    for d in sorted(devices, key=lambda d: d.index):
        groups.setdefault(d.model, []).append(d)
    return list(groups.values())


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def _model_counts(groups: Sequence[Sequence[Device]], count: int) -> list[int]:
    """How many partitions each model gets: each divides its model's device
    count, they add up to `count`, and sizes are as even as they can be."""
    options = [_divisors(len(g)) for g in groups]
    best: tuple[int, tuple[int, ...]] | None = None
    for ks in itertools.product(*options):
        if sum(ks) != count:
            continue
        sizes = [len(g) // k for g, k in zip(groups, ks, strict=True)]
        spread = max(sizes) - min(sizes)
        if best is None or spread < best[0]:
            best = (spread, ks)
    if best is None:
        totals = {0}
        for opts in options:
            totals = {t + k for t in totals for k in opts}
        models = ", ".join(f"{len(g)} x {g[0].model}" for g in groups)
        raise PartitionError(
            f"cannot split {models} into {count} partition(s) without mixing models or splitting a model unevenly: "
            f"use --partitions {', '.join(map(str, sorted(totals)))}, or --mode manual"
        )
    return list(best[1])


def _auto_split_models(devices: Sequence[Device], count: int, split: SplitOrder) -> list[list[Device]]:
    groups = _by_model(devices)
    if len(groups) == 1:
        return _auto_split(devices, count, split)
    counts = _model_counts(groups, count)
    return [block for g, k in zip(groups, counts, strict=True) for block in _auto_split(g, k, split)]


def _type_warnings(parts: Sequence[Partition]) -> list[str]:
    """One warning per set of models that some partitions mix."""
    mixed: dict[tuple[tuple[str, ...], str | None], list[str]] = {}
    for p in parts:
        if len(p.models) > 1:
            mixed.setdefault((p.models, p.accelerator_type), []).append(p.name)
    out = []
    for (models, kind), names in mixed.items():
        what = f"partition {names[0]} mixes" if len(names) == 1 else f"partitions {', '.join(names)} mix"
        why = ": no single accelerator type is advertised (each device's model stays listed in `devices`)"
        if kind is not None:
            why = f", all of accelerator type {kind}"
        out.append(f"{what} models {', '.join(models)}{why}")
    return out


def _manual_groups(devices: Sequence[Device], manual: str) -> list[tuple[str, list[Device]]]:
    chunks = [c.partition("=") for c in manual.split(";") if c.strip()]
    entries = [(name.strip(), ids) if sep else (f"p{n}", name) for n, (name, sep, ids) in enumerate(chunks)]
    if not entries:
        raise PartitionError(f"manual spec {manual!r} names no partitions")
    by_index = {d.index: d for d in devices}
    by_id = {d.id: d for d in devices}
    owner: dict[DeviceId, str] = {}
    groups: list[tuple[str, list[Device]]] = []
    for name, spec in entries:
        try:
            validate.partition_name(name)
        except InputError as e:
            raise PartitionError(f"manual spec: {e}") from None
        if any(a == name for a, _ in groups):
            raise PartitionError(f"partition {name!r} appears twice in manual spec")
        tokens = [t.strip() for t in spec.split(",")]
        if not any(tokens):
            raise PartitionError(f"partition {name!r} has no devices")
        group: list[Device] = []
        for tok in tokens:
            if tok in by_id:
                found = [by_id[tok]]
            else:
                try:
                    idx = parse_visible_ids(tok)
                except VisibilityError:
                    raise PartitionError(f"partition {name!r}: unknown device {tok!r}") from None
                missing = [i for i in idx or [] if i not in by_index]
                if missing or not idx:
                    raise PartitionError(f"partition {name!r}: unknown device index {missing[0] if missing else tok!r}")
                found = [by_index[i] for i in idx]
            for d in found:
                if d.id in owner:
                    raise PartitionError(
                        f"device {d.id} (index {d.index}) is in both partition {owner[d.id]!r} and partition {name!r}"
                    )
                owner[d.id] = name
                group.append(d)
        groups.append((name, group))
    return groups


def plan_partitions(
    devices: Sequence[Device],
    mode: str,
    partitions: int | None = None,
    manual: str | None = None,
    default_type: str | None = None,
    *,
    traits: DeviceTraits,
) -> Plan:
    """Plan which devices each partition (one raylet each) of the host gets.

    `default_type` is the host's accelerator type as its backend reports it,
    for devices that name none of their own (see `group_type`); `traits`
    what the backend declares of its family (may devices be shared, how to
    order them for AUTO_SPLIT).
    """
    mode = Mode.parse(mode)
    devices = sorted(devices, key=lambda d: d.index)
    if not devices:
        raise PartitionError("no devices to partition")
    families = {d.family for d in devices}
    if len(families) > 1:
        raise PartitionError(f"devices of several families ({', '.join(sorted(families))}): plan one family at a time")
    family = devices[0].family
    if partitions is not None and partitions < 1:
        raise PartitionError(f"--partitions must be at least 1, got {partitions}")
    warnings: list[str] = []

    if mode is Mode.MANUAL:
        if manual is None:
            raise PartitionError("manual mode needs a spec such as 'a=0-3;b=4-7'")
        named = _manual_groups(devices, manual)
        if partitions is not None and partitions != len(named):
            raise PartitionError(
                f"--partitions {partitions} does not match the {len(named)} partitions of the manual spec"
            )
    elif manual is not None:
        raise PartitionError(f"a manual spec was given with mode {mode.value}; use --mode manual")
    elif mode is Mode.SHARED:
        if not traits.shareable:
            raise PartitionError(
                f"SHARED mode is impossible on {family} devices: a device belongs to one process (its backend "
                "declares them not shareable); use auto-split or manual"
            )
        warnings.append("shared: every partition sees every device, with no memory isolation between them")
        named = [(f"p{i}", list(devices)) for i in range(partitions or 1)]
    else:
        n = partitions or len(_by_model(devices))
        if n > len(devices):
            raise PartitionError(f"more partitions ({n}) than devices ({len(devices)})")
        named = [(f"p{i}", g) for i, g in enumerate(_auto_split_models(devices, n, traits.split))]

    topology = any(d.peers for d in devices)
    host_models = len(models_of(devices))
    parts = tuple(_make(a, g, default_type, host_models) for a, g in named)
    quality = tuple(assess(g, topology) for _, g in named)
    used = {i for p in parts for i in p.device_ids}
    unassigned = tuple(d.id for d in devices if d.id not in used)
    if unassigned:
        warnings.append(f"{len(unassigned)} device(s) in no partition: {', '.join(unassigned)}")
    warnings += _type_warnings(parts)
    for p, q in zip(parts, quality, strict=True):
        if q.connected is False:
            warnings.append(f"partition {p.name}: devices are not all linked to each other")
        if mode is not Mode.SHARED and not q.aligned:
            warnings.append(
                f"partition {p.name}: core ids {format_visible_ids(p.core_ids, 'ranges')} are not one aligned range"
            )
    return Plan(mode, parts, unassigned, tuple(warnings), quality)


PARTITION_LABEL = "ray-accel.io/partition"
TYPE_LABEL = "ray-accel.io/accelerator-type"
HOST_LABEL = "ray-accel.io/host"  # the host's key: `<name>_<ip>`
FAMILY_LABEL = "ray-accel.io/family"
RESOURCE_LABEL = "ray-accel.io/resource"
DEVICES_LABEL = "ray-accel.io/devices"  # device indexes of the partition
CORES_LABEL = "ray-accel.io/cores"  # its schedulable ids (sorted, as its mask names them)
LINKS_LABEL = "ray-accel.io/links"  # device indexes outside it that its devices link to
CONNECTED_LABEL = "ray-accel.io/connected"  # "true"/"false": its own devices linked to each other

MAX_VALUE = 63
ID_SET = re.compile(r"^[0-9]+(-[0-9]+)?(_[0-9]+(-[0-9]+)?)*$")


class LabelError(InputError):
    """A label value that does not follow ray-accel's format."""


def encode_ids(ids: Iterable[int]) -> str | None:
    """`[0, 1, 2, 3, 8]` -> `"0-3_8"`; None when empty or too long for a label value."""
    ordered = sorted(set(ids))
    if not ordered:
        return None
    text = format_visible_ids(ordered, "ranges").replace(",", "_")
    return text if len(text) <= MAX_VALUE else None


def decode_ids(text: str) -> tuple[int, ...]:
    """`"0-3_8"` -> `(0, 1, 2, 3, 8)`; a bad value raises `LabelError` naming it."""
    if ID_SET.match(text):
        with contextlib.suppress(VisibilityError):  # a duplicate, a descending range: refused below
            return tuple(parse_visible_ids(text.replace("_", ",")) or ())
    raise LabelError(f"bad id set label value {text!r}: use ranges joined by '_', e.g. 0-3_8")


def node_host(name: str, ip: str, labels: Mapping[str, str]) -> str:
    """A raylet's host key from what Ray records of it (its host name,
    `NodeManagerHostname`, and node IP, `NodeManagerAddress`): the value
    `start` gave its host label, also for a raylet started without it. Where
    Ray names neither, the label itself."""
    if name and ip:
        return host_key(name, ip)
    return labels.get(HOST_LABEL) or name or ip or "?"


def topology_labels(
    partitions: Sequence[Partition], devices: Sequence[Device], host: HostId, family: str, resource: str
) -> dict[str, dict[str, str]]:
    """Partition name -> the labels its raylet carries beyond `PARTITION_LABEL`."""
    by_id = {d.id: d for d in devices}
    topology = any(d.peers for d in devices)
    out: dict[str, dict[str, str]] = {}
    for part in partitions:
        group = [by_id[i] for i in part.device_ids]
        own = {d.index for d in group}
        linked = {by_id[p].index for d in group for p in d.peers if p in by_id} - own
        labels = {HOST_LABEL: host.key, FAMILY_LABEL: family, RESOURCE_LABEL: resource}
        for key, ids in ((DEVICES_LABEL, own), (CORES_LABEL, part.core_ids), (LINKS_LABEL, linked)):
            if (text := encode_ids(ids)) is not None:
                labels[key] = text
        connected = assess(group, topology).connected if len(group) > 1 else True
        if connected is not None:
            labels[CONNECTED_LABEL] = "true" if connected else "false"
        out[part.name] = {k: v for k, v in labels.items() if LABEL_VALUE.match(v)}
    return out


OUR_LABEL_PREFIX = PARTITION_LABEL.split("/", 1)[0] + "/"
# Ray's own resources: set by their own flags (--num-cpus ...), never in --resources.
RAY_RESOURCE_FLAGS = {
    "CPU": "-- --num-cpus",
    ray_resources.RAY_GPU: "(set per partition)",
    "memory": "-- --memory",
    "object_store_memory": "-- --object-store-memory",
}


def check_user_keys(labels: Mapping[str, str], resources: Mapping[str, float], resource_name: str) -> None:
    """Refuse a user label or resource that ray-accel sets itself (`resource_name`: the
    accelerator resource), naming it."""
    for key in labels:
        if key.startswith(OUR_LABEL_PREFIX):
            raise InputError(
                f"--labels: {key!r} is ray-accel's own label key ({OUR_LABEL_PREFIX}...: partition, type and host "
                "labels are set per partition); choose another key"
            )
    for name in resources:
        if name == resource_name:
            raise InputError(
                f"--resources: {name!r} is the accelerator resource ray-accel sets per partition from its devices"
            )
        if name in RAY_RESOURCE_FLAGS:
            raise InputError(
                f"--resources: {name!r} is Ray's own resource; give the host's figure with {RAY_RESOURCE_FLAGS[name]}"
            )
        if name.startswith(("accelerator_type:", "node:")):
            raise InputError(f"--resources: {name!r} is a resource Ray sets itself ({name.split(':')[0]}:...)")
