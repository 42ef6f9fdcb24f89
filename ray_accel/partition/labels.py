"""The node labels a partition's raylet carries, so work can target it and a
placement policy can see what it holds.

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
import re
from collections.abc import Iterable, Mapping, Sequence

from ray_accel.core import ray_resources
from ray_accel.core.devices import Device
from ray_accel.core.errors import InputError
from ray_accel.core.hosts import HostId, host_key
from ray_accel.core.validate import LABEL_VALUE
from ray_accel.core.visibility import VisibilityError, format_visible_ids, parse_visible_ids
from ray_accel.partition.plan import Partition, assess

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
    return host_key(name, ip) if name and ip else labels.get(HOST_LABEL) or name or ip or "?"


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
