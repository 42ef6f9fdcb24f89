"""`ray_accel.init`: a local `ray.init` that sees this host's accelerators
through the bridge, optionally restricted to one partition's mask."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Sequence
from typing import Any

from ray_accel.bridge.managers import LOST_WITHOUT_BRIDGE, BridgeSpec, BridgeUnsupported, install, raylet_env
from ray_accel.core import ray_resources
from ray_accel.core.errors import InputError
from ray_accel.core.visibility import format_visible_ids
from ray_accel.partition.inherited import InheritedMask, inherited_mask
from ray_accel.partition.plan import Partition, group_type, models_of
from ray_accel.plugins.discovery import discover
from ray_accel.rayapi import address as rayapi_address
from ray_accel.rayapi.accelerators import refresh_original_visible_ids
from ray_accel.rayapi.feature import RayApiMissing

log = logging.getLogger(__name__)

PartitionArg = Partition | str | Sequence[int] | None


def _partition_ids(
    partition: PartitionArg, spec: BridgeSpec, plugin_parse: Any, mask: InheritedMask | None
) -> list[int] | None:
    if partition is None:
        return None
    if isinstance(partition, Partition):
        ids = list(partition.core_ids)
    elif isinstance(partition, str):
        ids = plugin_parse(partition) or []
    else:
        ids = [int(i) for i in partition]
    unknown = sorted(set(ids) - set(spec.unit_ids))
    if unknown:
        raise InputError(f"partition names {spec.resource_name} id {unknown[0]}, which this host does not have")
    if not ids:
        raise InputError("partition is empty")
    if mask is not None and (outside := sorted(set(ids) - set(mask.ids))):
        raise InputError(
            f"partition names {spec.resource_name} id {outside[0]}, outside the inherited mask {mask.env}={mask.value}"
        )
    return ids


def _apply_recorded_auth(address: str | None) -> None:
    """A driver joining a cluster that `ray-accel start` made on this host gets
    that cluster's auth environment (mode and token path) without guesswork."""
    if address in (None, "local"):
        return
    from ray_accel.cluster import auth, statedir

    place = statedir.locate().place
    record = None if place is None else statedir.load(place)
    if record is None or (address != "auto" and address.removeprefix("ray://") != record.gcs_address):
        return
    if auth.TOKEN_ENV in os.environ or (auth.TOKEN_PATH_ENV in os.environ and record.auth.token_path is not None):
        return  # the user's own token wins, as it does for Ray itself
    auth.apply(record.auth)


def _starts_a_local_cluster(address: str | None, temp_dir: str | None) -> bool:
    """Whether `ray.init(address=...)` will start a new local cluster, by Ray's
    own rule (no address, RAY_ADDRESS or latest `ray start` cluster: a new one)."""
    try:
        return rayapi_address.bootstrap_address(address, temp_dir) is None
    except RayApiMissing as e:  # another Ray: leave the token to it
        log.info("ray-accel: %s; the local token is left to Ray", e)
        return False
    except Exception:  # an address Ray itself will refuse, in its own words
        return False


def check_request(spec: BridgeSpec, kwargs: dict[str, Any], visible: Sequence[int], where: str) -> None:
    """Refuse, before any Ray process starts, a local cluster asking for more
    of our resource than `visible` holds (or a fraction of a whole unit): Ray
    2.60 finds this only after it has started the GCS and its helpers, and
    leaves them running."""
    requested = ray_resources.requested(spec.resource_name, kwargs)
    if requested is None:
        return
    what = ray_resources.request_name(spec.resource_name)
    if isinstance(requested, bool) or not isinstance(requested, (int, float)) or not math.isfinite(requested):
        raise InputError(f"ray_accel.init: {what}={requested!r} is not a number")
    if requested < 0:
        raise InputError(f"ray_accel.init: {what}={requested!r} is negative")
    if spec.whole_units_only and not float(requested).is_integer():
        raise InputError(f"ray_accel.init: {what}={requested!r}: {spec.resource_name} come in whole units")
    if requested > len(visible):
        raise InputError(
            f"ray_accel.init: {what}={requested:g}, but {where} holds {len(visible)} "
            f"({spec.visible_ids_env}={format_visible_ids(visible, 'ranges') or '<none>'}); nothing was started"
        )


def init(partition: PartitionArg = None, backend: str | None = None, **ray_init_kwargs: Any) -> Any:
    """`ray.init(**ray_init_kwargs)` with the accelerators of this host registered
    through ray-accel. With `partition` (a `Partition`, a mask such as "0-7",
    or ids), the local raylet and its workers see only those devices. A mask
    already set in the environment (Slurm, a container) bounds what the
    partition may name. A request for more of the accelerator resource than is
    visible is refused before any Ray process starts. With `address` naming a
    cluster that `ray-accel start` made on this host, the driver also gets that
    cluster's auth environment."""
    import ray

    address = ray_init_kwargs.get("address")
    local = address in (None, "local")
    if partition is not None and not local:
        raise InputError(
            f"partition={partition!r} restricts a local cluster; with address={address!r} the raylets already exist "
            "(target a partition with label_selector instead)"
        )
    plugin = discover(backend).primary
    if plugin is None and (partition is not None or backend is not None):
        # Plain ray.init would drop what was asked for: refuse instead.
        asked = f"partition={partition!r}" if partition is not None else f"backend={backend!r}"
        which = f"backend {backend!r} is" if backend is not None else "no accelerator backend is"
        raise InputError(
            f"ray_accel.init: {asked} needs an active backend, and {which} not active on this host "
            "(see `ray-accel devices`); nothing was started"
        )
    _apply_recorded_auth(address)
    if _starts_a_local_cluster(address, ray_init_kwargs.get("_temp_dir")):
        from ray_accel.cluster import auth

        made = auth.ensure_local_token(os.environ)
        if made is not None:
            log.info("ray-accel: made the cluster token file %s (mode 0600)", made)

    if plugin is None:
        log.info("ray-accel: no active accelerator backend; plain ray.init")
        return ray.init(**ray_init_kwargs)
    spec = BridgeSpec.from_plugin(plugin)
    mask = inherited_mask(plugin, os.environ)
    ids = _partition_ids(partition, spec, plugin.parse_visible, mask)
    if ids is not None:
        visible, where = ids, "the partition"
    elif mask is not None:
        visible, where = list(mask.ids), f"the inherited mask {mask.env}={mask.value}"
    else:
        visible, where = list(spec.unit_ids), "this host"
    if local:
        check_request(spec, ray_init_kwargs, visible, where)
    # The local raylet advertises the type of the devices it gets (none if several).
    devices = plugin.list_devices()
    chosen = [d for d in devices if set(d.core_ids) & set(visible)]
    spec = dataclasses.replace(
        spec, accelerator_type=group_type(chosen, spec.accelerator_type, len(models_of(devices)))
    )
    try:
        install([spec])
    except BridgeUnsupported as e:
        log.warning("ray-accel: %s; ray.init gets explicit resources and masks. %s", e, LOST_WITHOUT_BRIDGE)
        os.environ.update(dict(spec.process_env))  # needed with or without the bridge
        if local:
            # Ray's own managers read comma lists only, and detect nothing on
            # a family they do not know: give them the mask and the count.
            os.environ[spec.visible_ids_env] = format_visible_ids(visible)
            ray_resources.with_count(spec.resource_name, len(visible), ray_init_kwargs)
        return ray.init(**ray_init_kwargs)
    # The raylet that ray.init starts inherits this environment, and so do its
    # workers: the mask, the preload of our bridge and the spec it reads.
    os.environ.update(raylet_env([spec], dict(os.environ)))
    if ids is not None:
        os.environ[spec.visible_ids_env] = format_visible_ids(ids)
    refresh_original_visible_ids()
    return ray.init(**ray_init_kwargs)
