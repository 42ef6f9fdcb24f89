"""The host as the active plugins see it: one call for the CLI and the
bridge; and this process's own backend (`process_backend`)."""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from ray_accel.core.devices import Device
from ray_accel.core.errors import InputError, RayAccelError
from ray_accel.core.reader import Node, ReadError, dump, dump_fields, parse_json
from ray_accel.plugins.discovery import PluginStatus, discover_plugins, load_plugin
from ray_accel.plugins.interface import DevicePlugin

# The bridge spec a raylet ray-accel started carries to every process it
# starts (`ray_accel.bridge.managers.BridgeSpec.to_env`: a JSON list of specs).
SPEC_ENV = "RAYACCEL_BRIDGE_SPEC"


class NoActiveBackend(RayAccelError):
    """No backend is active on this host; the message names each installed
    one and why it is inactive (`details` has them as JSON)."""

    def __init__(self, statuses: Sequence[PluginStatus]) -> None:
        inactive = ", ".join(f"{s.name} ({s.reason})" for s in statuses)
        why = f"inactive: {inactive}" if inactive else "no backend is installed"
        super().__init__(f"no active accelerator backend on this host; {why}")
        self.details = {"backends": [s.to_json() for s in statuses]}


@dataclass(frozen=True)
class Inventory:
    statuses: tuple[PluginStatus, ...]

    @property
    def plugins(self) -> list[DevicePlugin]:
        return [s.plugin for s in self.statuses if s.active and s.plugin is not None]

    @property
    def primary(self) -> DevicePlugin | None:
        """The plugin a raylet is split by: Ray resolves one family per node."""
        return next(iter(self.plugins), None)

    def require_primary(self) -> DevicePlugin:
        if (plugin := self.primary) is None:
            raise NoActiveBackend(self.statuses)
        return plugin

    def devices(self) -> list[tuple[str, Device]]:
        return [(p.name, d) for p in self.plugins for d in p.list_devices()]

    def to_json(self) -> dict[str, object]:
        """`devices --json`: the host as the primary plugin sees it, every
        backend's state, and every device with its plugin's name."""
        primary = self.primary
        info = {} if primary is None else dump_fields(primary.host_info())
        backends = dump([p.host_info() for p in self.plugins])
        return {
            "host": {"hostname": socket.gethostname(), **info, "backends": backends},
            "plugins": [s.to_json() for s in self.statuses],
            "devices": [dump_fields(d, plugin=name) for name, d in self.devices()],
        }


def discover(backend: str | None = None) -> Inventory:
    """Discover plugins; a plugin that rejected its user-given configuration
    (a bad RAYACCEL_MOCK, say) is a user error, not a missing device."""
    statuses = discover_plugins(only=backend)
    if backend is not None and not statuses:
        known = sorted({s.name for s in discover_plugins()})
        raise InputError(f"unknown backend {backend!r}: installed backends are {', '.join(known) or 'none'}")
    for s in statuses:
        if isinstance(s.error, InputError):
            raise s.error
    return Inventory(tuple(statuses))


def spec_backend(value: str | None) -> str | None:
    """The backend a bridge spec (`SPEC_ENV`'s value) names, or None without one."""
    if not value:
        return None
    try:
        rows = Node(parse_json(value, SPEC_ENV, "{error}")).list()
        return rows[0].at("backend").text() if rows else None
    except ReadError as e:
        raise InputError(f"bad {SPEC_ENV}: {e}") from None


@functools.cache
def process_backend() -> DevicePlugin | None:
    """This process's backend, found once: the one its raylet's bridge spec
    names, loaded by name and not probed (no discovery; `BackendUnavailable`
    where it cannot be loaded); without a spec (a raylet ray-accel did not
    start), discovery's primary, if any."""
    name = spec_backend(os.environ.get(SPEC_ENV))
    return load_plugin(name) if name is not None else discover().primary
