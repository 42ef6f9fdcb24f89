"""Finding backends (the entry-point group ``ray_accel.backends``), and the
host as the active ones see it (`PluginInventory`: one call for the CLI and the
bridge).

Discovery never raises for what the machine reports: a plugin that cannot
load, finds no hardware, or reports data that contradicts itself (a driver
listing one UUID twice, say) is listed inactive with its reason, and every
other backend goes on. Only configuration the user wrote (a bad mock spec, a
bad mask in the environment) is an error for the user to fix.

Besides discovery: what every installed backend declares on its class (its
collectives, the variables it protects), read without constructing it or
probing hardware; one backend loaded by name (a training worker's, named by
its raylet's bridge spec); and this process's own backend (`process_backend`).
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ray_accel.core.devices import Device, validate_inventory
from ray_accel.core.errors import InputError, RayAccelError
from ray_accel.core.reader import Cursor, ReadError, dump, dump_fields, parse_json
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

    def to_json(self) -> dict[str, str | bool | None]:
        return {"name": self.name, "active": self.active, "reason": self.reason}


class BackendUnavailable(RayAccelError):
    """A backend that was asked for by name cannot be loaded or constructed."""


def _inactive(name: str, reason: str, error: BaseException | None = None) -> PluginStatus:
    log.info("ray-accel backend %s inactive: %s", name, reason)
    return PluginStatus(name=name, active=False, reason=reason, error=error)


def _construct(factory: object) -> DevicePlugin:
    """The plugin an entry point's object makes; `BackendUnavailable` naming
    why not. Nothing is probed."""
    try:
        plugin = factory() if callable(factory) else factory
    except Exception as e:  # a third-party constructor can fail any way
        raise BackendUnavailable(f"failed to construct: {type(e).__name__}: {e}") from e
    if not isinstance(plugin, DevicePlugin):
        raise BackendUnavailable(f"entry point gave {type(plugin).__name__}, not a DevicePlugin")
    return plugin


def _activate(name: str, factory: object) -> PluginStatus:
    try:
        plugin = _construct(factory)
    except BackendUnavailable as e:
        return _inactive(name, str(e), e.__cause__)
    try:
        if (reason := plugin.probe()) is not None:
            return _inactive(name, reason)
        devices = validate_inventory(plugin.list_devices())
    except Exception as e:
        return _inactive(name, f"discovery failed: {type(e).__name__}: {e}", e)
    if not devices:
        return _inactive(name, "no devices found")
    return PluginStatus(name=name, active=True, reason=None, plugin=plugin)


def discover_plugins(only: str | None = None) -> list[PluginStatus]:
    """Load every registered backend and say which ones are active.

    With RAYACCEL_MOCK set only the mock backend may be active: the others are
    not even probed, so a test on a GPU machine never touches the real GPU.
    """
    mock_on = bool(os.environ.get(MOCK_ENV))
    statuses: list[PluginStatus] = []
    for ep in [e for e in _entry_points() if only is None or e.name == only]:
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


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    """Each installed backend's entry point once (the first of a name), by name."""
    seen: dict[str, importlib.metadata.EntryPoint] = {}
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        seen.setdefault(ep.name, ep)
    return list(seen.values())


def load_plugin(name: str) -> DevicePlugin:
    """The installed backend `name`, constructed but not probed (a worker
    whose raylet's spec names it needs its runtime, not its hardware).
    `BackendUnavailable` names the backend and why it cannot be had."""
    eps = _entry_points()
    ep = next((e for e in eps if e.name == name), None)
    if ep is None:
        installed = ", ".join(e.name for e in eps) or "none"
        raise BackendUnavailable(f"backend {name!r} is not installed here (installed: {installed})")
    try:
        factory = ep.load()
    except Exception as e:
        raise BackendUnavailable(f"backend {name!r} failed to load {ep.value}: {type(e).__name__}: {e}") from e
    try:
        return _construct(factory)
    except BackendUnavailable as e:
        raise BackendUnavailable(f"backend {name!r}: {e}") from e.__cause__


@dataclass(frozen=True)
class Declarations:
    """What the installed backends declare on their classes."""

    collectives: Mapping[str, tuple[str, ...]]  # backend -> the collectives its runtime makes
    protected_env: frozenset[str]  # the union of the variables they protect
    unknown: Mapping[str, str]  # backend -> why its declarations could not be read


def declarations() -> Declarations:
    """Every installed backend's class declarations. Loads each entry point
    (imports its module), never constructs a backend or probes hardware; a
    backend whose class cannot be loaded is in `unknown` with the reason
    (and a warning: what it would protect is not protected). Read once per
    import path: every hooked task asks, and what is installed where this
    process looks for distributions does not change under it."""
    return _declarations(tuple(sys.path))


@functools.lru_cache(maxsize=4)
def _declarations(path: tuple[str, ...]) -> Declarations:
    collectives: dict[str, tuple[str, ...]] = {}
    protected: set[str] = set()
    unknown: dict[str, str] = {}
    for ep in _entry_points():
        try:
            obj = ep.load()
        except Exception as e:
            unknown[ep.name] = f"failed to load {ep.value}: {type(e).__name__}: {e}"
            continue
        cls = obj if isinstance(obj, type) else type(obj)
        if not issubclass(cls, DevicePlugin):
            unknown[ep.name] = f"entry point {ep.value} is {cls.__name__}, not a DevicePlugin class"
            continue
        collectives[ep.name] = tuple(cls.collectives)
        protected |= cls.protected_env
    for name, why in unknown.items():
        log.warning(
            "ray-accel: backend %s declares nothing readable (%s): its protected variables are unknown", name, why
        )
    return Declarations(collectives, frozenset(protected), unknown)


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
class PluginInventory:
    statuses: tuple[PluginStatus, ...]

    @property
    def plugins(self) -> list[DevicePlugin]:
        return [s.plugin for s in self.statuses if s.active and s.plugin is not None]

    @property
    def primary(self) -> DevicePlugin | None:
        """The plugin a raylet is split by: Ray resolves one family per node."""
        plugins = self.plugins
        return plugins[0] if plugins else None

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


def discover(backend: str | None = None) -> PluginInventory:
    """Discover plugins; a plugin that rejected its user-given configuration
    (a bad RAYACCEL_MOCK, say) is a user error, not a missing device."""
    statuses = discover_plugins(only=backend)
    if backend is not None and not statuses:
        known = sorted({s.name for s in discover_plugins()})
        raise InputError(f"unknown backend {backend!r}: installed backends are {', '.join(known) or 'none'}")
    for s in statuses:
        if isinstance(s.error, InputError):
            raise s.error
    return PluginInventory(tuple(statuses))


def spec_backend(value: str | None) -> str | None:
    """The backend a bridge spec (`SPEC_ENV`'s value) names, or None without one."""
    if not value:
        return None
    try:
        rows = Cursor(parse_json(value, SPEC_ENV, "{error}")).list()
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
