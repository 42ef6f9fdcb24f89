"""Finding backends: the entry-point group ``ray_accel.backends``.

Discovery never raises for what the machine reports: a plugin that cannot
load, finds no hardware, or reports data that contradicts itself (a driver
listing one UUID twice, say) is listed inactive with its reason, and every
other backend goes on. Only configuration the user wrote (a bad mock spec, a
bad mask in the environment) is an error for the user to fix.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ray_accel.core.devices import validate_inventory
from ray_accel.plugins.interface import DevicePlugin

ENTRY_POINT_GROUP = "ray_accel.backends"
MOCK_ENV = "RAYACCEL_MOCK"
MOCK_PLUGIN = "mock"

log = logging.getLogger(__name__)


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
