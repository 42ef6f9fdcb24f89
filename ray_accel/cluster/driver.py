"""`ray_accel.init`: a local `ray.init` that sees this node's accelerators
through the bridge, optionally restricted to one partition's mask."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from typing import Any

from ray_accel.bridge.managers import BridgeSpec, BridgeUnsupported, install, raylet_env, refresh_worker_masks
from ray_accel.core.errors import InputError
from ray_accel.core.visibility import format_visible_ids
from ray_accel.partition.plan import Partition, group_type, models_of
from ray_accel.plugins.inventory import discover

log = logging.getLogger(__name__)

PartitionArg = Partition | str | Sequence[int] | None


def _partition_ids(partition: PartitionArg, spec: BridgeSpec, plugin_parse: Any) -> list[int] | None:
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
        raise InputError(f"partition names {spec.resource_name} id {unknown[0]}, which this node does not have")
    if not ids:
        raise InputError("partition is empty")
    return ids


def _apply_recorded_auth(address: str | None) -> None:
    """A driver joining a cluster that `ray-accel start` made on this host gets
    that cluster's auth environment (mode and token path) without guesswork."""
    if address in (None, "local"):
        return
    from ray_accel.cluster import auth, state

    record = state.load()
    if record is None or record.get("auth") is None:
        return
    if address != "auto" and address.removeprefix("ray://") != record.get("gcs_address"):
        return
    recorded = auth.Auth.from_json(record["auth"])
    if auth.TOKEN_ENV in os.environ or (auth.TOKEN_PATH_ENV in os.environ and recorded.token_path is not None):
        return  # the user's own token wins, as it does for Ray itself
    auth.apply(recorded)


def init(partition: PartitionArg = None, backend: str | None = None, **ray_init_kwargs: Any) -> Any:
    """`ray.init(**ray_init_kwargs)` with the accelerators of this node registered
    through ray-accel. With `partition` (a `Partition`, a mask such as "0-7",
    or ids), the local raylet and its workers see only those devices. With
    `address` naming a cluster that `ray-accel start` made on this host, the
    driver also gets that cluster's auth environment."""
    import ray

    address = ray_init_kwargs.get("address")
    if partition is not None and address not in (None, "local"):
        raise InputError(
            f"partition={partition!r} restricts a local cluster; with address={address!r} the raylets already exist "
            "(target a partition with label_selector instead)"
        )
    _apply_recorded_auth(address)

    plugin = discover(backend).primary
    if plugin is None:
        log.info("ray-accel: no active accelerator backend; plain ray.init")
        return ray.init(**ray_init_kwargs)
    spec = BridgeSpec.from_plugin(plugin)
    ids = _partition_ids(partition, spec, plugin.parse_visible)
    # The local raylet advertises the type of the devices it gets (none if several).
    devices = plugin.list_devices()
    chosen = [d for d in devices if ids is None or set(d.core_ids) & set(ids)]
    spec = dataclasses.replace(
        spec, accelerator_type=group_type(chosen, spec.accelerator_type, len(models_of(devices)))
    )
    try:
        install([spec])
    except BridgeUnsupported as e:
        log.warning("ray-accel: %s", e)
        os.environ.update(dict(spec.process_env))  # needed with or without the bridge
        if ids is not None:
            os.environ[spec.visible_ids_env] = format_visible_ids(ids)
            resources = dict(ray_init_kwargs.pop("resources", None) or {})
            if spec.resource_name == "GPU":
                ray_init_kwargs.setdefault("num_gpus", len(ids))
            else:
                resources.setdefault(spec.resource_name, len(ids))
            ray_init_kwargs["resources"] = resources
        return ray.init(**ray_init_kwargs)
    # The raylet that ray.init starts inherits this environment, and so do its
    # workers: the mask, the preload of our bridge and the spec it reads.
    os.environ.update(raylet_env([spec], dict(os.environ)))
    if ids is not None:
        os.environ[spec.visible_ids_env] = format_visible_ids(ids)
    refresh_worker_masks()
    return ray.init(**ray_init_kwargs)
