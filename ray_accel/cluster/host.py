"""This host's amounts as plain `ray start` would claim them, and each
partition's share of them (the division itself is `ray_accel.partition.share`).

The user's `--num-cpus`, `--memory` and `--object-store-memory` (after `--`,
`startargs.user_figures`) are read as the host's figures, in place of what Ray would detect. Detection
uses Ray's own functions, so a share is what Ray would size for that part of
the host: `memory` = available memory less the object store, the object store
= Ray's default proportion of available memory, capped by /dev/shm and Ray's
maximum (`ray._private.utils.resolve_object_store_memory`, Ray 2.60).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Collection, Mapping, Sequence

from ray_accel.cluster.startargs import HOST_FLAGS
from ray_accel.core.errors import InputError
from ray_accel.core.numa import read_topology
from ray_accel.core.validate import HEAD
from ray_accel.partition.plan import Partition
from ray_accel.partition.share import Division, HostResources, Share, divide
from ray_accel.rayapi import node as rayapi_node
from ray_accel.rayapi.feature import RayApiMissing

log = logging.getLogger(__name__)

# Ray 2.60's ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES: a raylet refuses less.
OBJECT_STORE_MINIMUM = 75 * 1024 * 1024
# A head's own raylet (docs/design.md): no CPUs, devices or memory to
# schedule on, beside the partitions' shares of the host; Ray's smallest
# object store.
HEAD_SHARE = Share(HEAD, 0, 0, OBJECT_STORE_MINIMUM)


def _ray_detected() -> tuple[int, int, Callable[[int], int]]:
    """CPUs, available memory and Ray's object-store sizing rule, from Ray's
    own functions (psutil and Ray 2.60's 30%, with a warning, where this Ray
    lacks them)."""
    try:
        sizing = rayapi_node.host_sizing()
        rayapi_node.object_store_for(sizing.available_memory)  # the rule is there, and takes what we pass
        return sizing.cpus, sizing.available_memory, rayapi_node.object_store_for
    except RayApiMissing as e:
        import psutil

        log.warning("ray-accel: %s; the host is sized with psutil and 30%% of its memory for the object store", e)
        vm = psutil.virtual_memory()
        return os.cpu_count() or 1, int(vm.total - vm.used), lambda avail: int(avail * 0.3)


def read_host(figures: Mapping[str, int], resources: Mapping[str, float] | None = None) -> HostResources:
    """The host's amounts: the user's `figures` (`RayOptions.figures`), else Ray's own."""
    cpus, available, size_store = _ray_detected()
    store = figures.get("object_store_memory", int(size_store(available)))
    memory = figures.get("memory", available - store)
    if memory <= 0:
        raise InputError(
            f"--object-store-memory {store} leaves no memory for tasks: the host has {available} bytes available"
        )
    sources = {key: flag if key in figures else "host" for flag, key in HOST_FLAGS.items()}
    return HostResources(figures.get("cpus", cpus), memory, store, dict(resources or {}), sources)


def allowed_cpus() -> frozenset[int]:
    """The CPUs this process may run on (a cpuset or `taskset` narrows them)."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return frozenset(range(os.cpu_count() or 1))


def divide_host(parts: Sequence[Partition], numa: Sequence[Collection[int]], host: HostResources) -> Division:
    """Each of `parts` (its devices on the NUMA nodes `numa[i]`) gets amounts
    of `host` in proportion to its units, placed on the CPUs this process may use."""
    names, units = [p.name for p in parts], [len(p.core_ids) for p in parts]
    return divide(names, units, numa, host, read_topology(), allowed_cpus(), OBJECT_STORE_MINIMUM)
