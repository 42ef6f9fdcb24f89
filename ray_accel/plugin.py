"""The backend plugin interface and its discovery through entry points.

A backend is a `DevicePlugin` (one per node) registered under the entry-point
group ``ray_accel.backends``. For each raylet it hands out an `AgentContext`
that sees only that raylet's devices. Discovery never raises: a plugin that
cannot load, finds no hardware or fails is listed inactive with its reason.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import psutil

from ray_accel.devices import Device, DeviceError, NodeInfo, all_core_ids, validate_inventory
from ray_accel.hooks import LifecycleHook, Workload
from ray_accel.runtime import RankInfo, base_worker_env
from ray_accel.samples import DeviceSample, ProcessSample
from ray_accel.visibility import VisibilityError, parse_visible_ids

if TYPE_CHECKING:
    from ray_accel.allocmap import AllocMap

ENTRY_POINT_GROUP = "ray_accel.backends"
MOCK_ENV = "RAYACCEL_MOCK"
MOCK_PLUGIN = "mock"

log = logging.getLogger(__name__)


class DevicePlugin(ABC):
    """One accelerator family on one node."""

    # Read-only properties, so a backend may answer with a class attribute or
    # (like the mock, whose family comes from its spec) compute them.
    @property
    @abstractmethod
    def name(self) -> str: ...

    @property
    @abstractmethod
    def resource_name(self) -> str: ...

    @property
    @abstractmethod
    def visible_ids_env(self) -> str: ...

    @property
    @abstractmethod
    def family(self) -> str: ...

    @abstractmethod
    def probe(self) -> str | None:
        """Find the hardware; return None when present, else why not."""

    @abstractmethod
    def list_devices(self) -> tuple[Device, ...]:
        """Every device of the node, ignoring any visibility mask."""

    @abstractmethod
    def node_info(self) -> NodeInfo: ...

    def parse_visible(self, value: str | None) -> list[int] | None:
        """Read this family's visibility variable into schedulable ids."""
        cores = set(all_core_ids(self.list_devices()))
        ids = parse_visible_ids(value)
        if ids is not None and cores:
            unknown = [i for i in ids if i not in cores]
            if unknown:
                raise VisibilityError(f"{self.visible_ids_env}={value!r} names {unknown[0]}, not on this node")
        return ids

    def configurable_slots(self) -> dict[str, float]:
        return {self.resource_name: float(len(all_core_ids(self.list_devices())))}

    def gather_node_metrics(self) -> list[DeviceSample]:
        return []

    def gather_process_metrics(self, pid: int) -> ProcessSample:
        return ProcessSample(pid=pid, device_memory_bytes={})

    def create_agent_context(self, device_mask: Sequence[str], agent_id: str) -> AgentContext:
        return AgentContext(self, device_mask, agent_id)

    def create_lifecycle_hook(self, workload: Workload) -> LifecycleHook:
        return LifecycleHook(workload)

    # Runtime side, used by training: which collective backend this family
    # wants and what a worker's environment must hold.
    def collective_backend(self) -> str:
        return "gloo"

    def worker_env(self, rank: RankInfo, visible_ids: Sequence[int]) -> dict[str, str]:
        return base_worker_env(self.visible_ids_env, rank, visible_ids)


class AgentContext:
    """A plugin seen through one raylet's device mask."""

    def __init__(self, plugin: DevicePlugin, device_mask: Sequence[str], agent_id: str) -> None:
        known = {d.id: d for d in plugin.list_devices()}
        unknown = [m for m in device_mask if m not in known]
        if unknown:
            raise DeviceError(f"agent {agent_id!r}: unknown device(s) {', '.join(unknown)}")
        self.plugin = plugin
        self.agent_id = agent_id
        self.device_mask = tuple(device_mask)
        self._devices = tuple(known[m] for m in sorted(set(device_mask), key=lambda m: known[m].index))

    def list_devices(self) -> tuple[Device, ...]:
        return self._devices

    def visible_ids(self) -> list[int]:
        return all_core_ids(self._devices)

    def available_slots(self) -> dict[str, float]:
        return {self.plugin.resource_name: float(len(self.visible_ids()))}

    def create_alloc_map(self) -> AllocMap:
        from ray_accel.allocmap import AllocMap

        return AllocMap.for_devices(self._devices)

    def create_lifecycle_hook(self, workload: Workload, allocation: Sequence[int] = ()) -> LifecycleHook:
        return self.plugin.create_lifecycle_hook(workload)

    def gather_agent_metrics(self) -> list[DeviceSample]:
        mine = {d.id for d in self._devices}
        return [s for s in self.plugin.gather_node_metrics() if s.device_id in mine]

    def gather_workload_metrics(self, workload_id: str) -> ProcessSample:
        """Device memory held by a workload's whole process tree, on this
        agent's devices. `workload_id` names the root pid ("1234", or the
        metrics layer's "title[1234]")."""
        root = int(workload_id.rsplit("[", 1)[-1].rstrip("]"))
        try:
            proc = psutil.Process(root)
            pids = [root, *(c.pid for c in proc.children(recursive=True))]
        except psutil.Error:
            return ProcessSample(root, {})
        held: dict[str, int] = {}
        for pid in pids:
            for dev, nbytes in self.gather_process_metrics(pid).device_memory_bytes.items():
                held[dev] = held.get(dev, 0) + nbytes
        return ProcessSample(root, held)

    def gather_process_metrics(self, pid: int) -> ProcessSample:
        sample = self.plugin.gather_process_metrics(pid)
        mine = {d.id for d in self._devices}
        return ProcessSample(pid, {k: v for k, v in sample.device_memory_bytes.items() if k in mine})

    def close(self) -> None:
        return None


@dataclass(frozen=True)
class PluginStatus:
    name: str
    active: bool
    reason: str | None
    plugin: DevicePlugin | None = field(default=None, compare=False)
    error: BaseException | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "active": self.active, "reason": self.reason}


def _inactive(name: str, reason: str, error: BaseException | None = None) -> PluginStatus:
    log.info("ray-accel backend %s inactive: %s", name, reason)
    return PluginStatus(name=name, active=False, reason=reason, error=error)


def _activate(name: str, factory: object) -> PluginStatus:
    try:
        plugin = factory() if callable(factory) else factory
    except Exception as e:  # a third-party constructor can fail any way
        return _inactive(name, f"failed to construct: {type(e).__name__}: {e}", e)
    if not isinstance(plugin, DevicePlugin):
        return _inactive(name, f"entry point gave {type(plugin).__name__}, not a DevicePlugin")
    try:
        reason = plugin.probe()
        if reason is not None:
            return _inactive(name, reason)
        devices = validate_inventory(plugin.list_devices())
    except Exception as e:
        return _inactive(name, f"discovery failed: {type(e).__name__}: {e}", e)
    if not devices:
        return _inactive(name, "no devices found")
    return PluginStatus(name=name, active=True, reason=None, plugin=plugin)


def discover_plugins(only: str | None = None, env: Mapping[str, str] | None = None) -> list[PluginStatus]:
    """Load every registered backend and say which ones are active.

    With RAYACCEL_MOCK set only the mock backend may be active: the others are
    not even probed, so a test on a GPU machine never touches the real GPU.
    """
    environ = os.environ if env is None else env
    mock_on = bool(environ.get(MOCK_ENV))
    statuses: list[PluginStatus] = []
    seen: set[str] = set()
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if ep.name in seen or (only is not None and ep.name != only):
            continue
        seen.add(ep.name)
        if mock_on and ep.name != MOCK_PLUGIN:
            statuses.append(_inactive(ep.name, f"{MOCK_ENV} is set: only the mock backend is active"))
            continue
        try:
            factory = ep.load()
        except Exception as e:
            statuses.append(_inactive(ep.name, f"failed to load {ep.value}: {type(e).__name__}: {e}", e))
            continue
        statuses.append(_activate(ep.name, factory))
    return statuses


def active_plugins(statuses: Sequence[PluginStatus]) -> list[DevicePlugin]:
    return [s.plugin for s in statuses if s.active and s.plugin is not None]
