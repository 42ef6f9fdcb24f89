"""The host's NUMA nodes and their CPUs, from sysfs.

Linux lists NUMA nodes under ``/sys/devices/system/node``: ``online`` names the
nodes that are online and ``node<N>/cpulist`` the CPUs of node N, both in the
kernel's list format (``0-23,48-71``; a node with memory but no CPUs has an
empty list). Source: the kernel's Documentation/ABI/stable/sysfs-devices-node
("/sys/devices/system/node/nodeX/cpulist: The CPUs associated to the node") and
Documentation/ABI/testing/sysfs-devices-system-cpu (the list format). The root
is ``RAYACCEL_NUMA_ROOT`` when set, so tests can lay out a fake node tree, as
``RAYACCEL_NEURON_SYSFS_ROOT`` does for the Neuron driver's tree.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ray_accel.core.visibility import VisibilityError, format_visible_ids, parse_visible_ids

NUMA_ROOT_ENV = "RAYACCEL_NUMA_ROOT"
DEFAULT_ROOT = "/sys/devices/system/node"
_NODE = re.compile(r"^node(\d+)$")


class CpuListError(ValueError):
    """A CPU list that is not in the kernel's format."""


def parse_cpulist(text: str) -> frozenset[int]:
    """``"0-3,8"`` -> {0, 1, 2, 3, 8}; ``""`` (a node without CPUs) -> {}:
    the ranges style of a visibility mask."""
    try:
        return frozenset(parse_visible_ids(text) or ())
    except VisibilityError as e:
        raise CpuListError(f"CPU list {text!r}: {e}") from None


def format_cpulist(cpus: Iterable[int]) -> str:
    """The kernel's list format: sorted, runs collapsed (``0-3,8``), which is
    the ranges style of a visibility mask."""
    return format_visible_ids(set(cpus), "ranges")


@dataclass(frozen=True)
class NumaTopology:
    """NUMA node -> its CPUs. `error` says why nothing could be read."""

    root: str
    nodes: Mapping[int, frozenset[int]] = field(default_factory=dict)
    error: str | None = None

    @property
    def cpu_nodes(self) -> dict[int, frozenset[int]]:
        """Nodes that have CPUs (memory-only nodes cannot run a raylet)."""
        return {n: c for n, c in self.nodes.items() if c}


def read_topology(root: str | None = None) -> NumaTopology:
    """Read the node tree at `root` (default: `RAYACCEL_NUMA_ROOT`, else the kernel's). Never raises: an
    unreadable or malformed tree is a topology with `error` set."""
    base = Path(root or os.environ.get(NUMA_ROOT_ENV) or DEFAULT_ROOT)
    try:
        names = sorted(os.listdir(base))
    except OSError as e:
        return NumaTopology(str(base), error=f"cannot read {base}: {e.strerror or e}")
    nodes: dict[int, frozenset[int]] = {}
    for name in names:
        if not (m := _NODE.match(name)):
            continue
        path = base / name / "cpulist"
        try:
            nodes[int(m.group(1))] = parse_cpulist(path.read_text())
        except OSError as e:
            return NumaTopology(str(base), error=f"cannot read {path}: {e.strerror or e}")
        except CpuListError as e:
            return NumaTopology(str(base), error=f"{path}: {e}")
    if not nodes:
        return NumaTopology(str(base), error=f"no node<N> directories under {base}")
    return NumaTopology(str(base), nodes)
