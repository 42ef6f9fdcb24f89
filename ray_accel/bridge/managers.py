"""The bridge into Ray's accelerator registry (private API, version-gated).

Ray 2.60 keeps a hard-coded set of `AcceleratorManager` classes. For each
active plugin we build a manager class from a small, serialisable
`BridgeSpec`, and put it in place of Ray's own for that resource name. That
must happen in three kinds of process (docs/design.md, "How Ray is wired"):

- the process that starts a raylet (`ray-accel start`'s launcher, or the
  driver of a local `ray_accel.init()`): detection and resource counts;
- every worker of that raylet: masking; carried by
  ``RAY_preload_python_modules=ray_accel.bridge.autoinstall`` and the spec in
  ``RAYACCEL_BRIDGE_SPEC``, so workers never re-run discovery;
- every submitting driver: request validation (whole Neuron cores).

What our managers fix over Ray's: masks with ranges (`0-3` is four cores),
masks written sorted, a real accelerator type (Trainium2, not
aws-neuron-core) and, on a host of several models, each partition's own
(`BridgeSpec.for_partition`; Ray 2.60 types a whole node by its GPU 0), and
any plugin's resource name. The spec also carries the variables every
process using the devices needs (`DevicePlugin.process_env`), which
`raylet_env` puts in each raylet's environment, so every worker inherits them;
the backend's name, so a training worker loads that backend's runtime by
name instead of running discovery; and its traits (`DeviceTraits`): whole
units or fractions, opaque ids in masks, and whether workers publish their
masks for the backend's telemetry.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ray_accel.core import masks, ray_resources
from ray_accel.core.errors import InputError, RayAccelError
from ray_accel.core.reader import Cursor, ReadError, dump, load, parse_json
from ray_accel.core.visibility import VisibilityError, format_mask, parse_visible_ids
from ray_accel.partition.plan import Partition
from ray_accel.plugins.discovery import SPEC_ENV as SPEC_ENV
from ray_accel.plugins.interface import NOSET_PREFIX, DevicePlugin
from ray_accel.plugins.traits import DeviceTraits
from ray_accel.rayapi import accelerators
from ray_accel.rayapi.feature import SUPPORTED_RAY, RayApiMissing, ray_version

log = logging.getLogger(__name__)

PRELOAD_ENV = "RAY_preload_python_modules"
UNIT_RESOURCES_ENV = "RAY_custom_unit_instance_resources"
AUTOINSTALL_MODULE = "ray_accel.bridge.autoinstall"
# What a raylet started without the bridge still has, and what it loses.
LOST_WITHOUT_BRIDGE = (
    "Kept: each partition's devices (its mask as a comma list), its count and labels. "
    "Lost: masks in workers are written by Ray's own manager (unsorted; for a resource Ray has no manager "
    "for, every worker sees the partition's whole mask), Ray's own accelerator type in place of ray-accel's, "
    "whole-core checks on requests, and per-process device attribution (top, metrics)"
)
# Ray's own word for "no device" in a visibility variable
# (ray/_private/accelerators/nvidia_gpu.py, Ray 2.60), kept for masks Ray wrote.
NONE_VISIBLE = "NoDevFiles"
# Ray's C++ default for custom_unit_instance_resources (read from _raylet.so).
RAY_DEFAULT_UNIT_RESOURCES = ("neuron_cores", "TPU", "NPU", "HPU", "RBLN", "FURIOSA", "TTNPU", "MBLT")
# Ray treats its GPU resource per instance itself.
PREDEFINED_UNIT_RESOURCES = (ray_resources.RAY_GPU,)


class BridgeUnsupported(RayAccelError):
    """This Ray version is outside the range ray-accel supports."""


@dataclass(frozen=True, kw_only=True)
class BridgeSpec:
    resource_name: str
    visible_ids_env: str
    family: str
    accelerator_type: str | None
    unit_ids: tuple[int, ...]  # every schedulable id on the host
    backend: str  # the backend's entry-point name
    traits: DeviceTraits
    # (name, value) pairs every process using these devices needs.
    process_env: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_plugin(cls, plugin: DevicePlugin) -> BridgeSpec:
        return cls(
            resource_name=plugin.resource_name,
            visible_ids_env=plugin.visible_ids_env,
            family=plugin.family,
            accelerator_type=plugin.host_info().accelerator_type,
            unit_ids=tuple(sorted(c for d in plugin.list_devices() for c in d.core_ids)),
            backend=plugin.name,
            traits=plugin.traits,
            process_env=tuple(sorted(plugin.process_env().items())),
        )

    def for_partition(self, part: Partition) -> BridgeSpec:
        """This spec as the raylet of `part` reports it: the accelerator type of
        that partition's own devices, or none where they are of several types."""
        return dataclasses.replace(self, accelerator_type=part.accelerator_type)

    @property
    def whole_units_only(self) -> bool:
        return not self.traits.shareable

    def to_env(self) -> str:
        return json.dumps([dump(self)])


def specs_from_env(value: str | None) -> list[BridgeSpec]:
    if not value:
        return []
    try:
        return [load(BridgeSpec, row.data) for row in Cursor(parse_json(value, SPEC_ENV, "{error}")).list()]
    except ReadError as e:
        raise InputError(f"bad {SPEC_ENV}: " + (f"missing {e.path!r}" if e.problem == "missing" else str(e))) from None


def visible_tokens(spec: BridgeSpec, value: str | None) -> list[str] | None:
    """The mask as Ray wants it: one string per unit, ranges expanded.

    A family whose masks may name devices by opaque ids (`DeviceTraits.opaque_ids`:
    GPU UUIDs) has a mask that is not integers passed through token by token,
    since Ray only maps slot i to the i-th token.
    """
    if value is None:
        return None
    text = value.strip()
    if text in ("", NONE_VISIBLE):
        return []
    try:
        ids = parse_visible_ids(text)
    except VisibilityError:
        if not spec.traits.opaque_ids:
            raise
        return [t.strip() for t in text.split(",")]
    return [str(i) for i in ids or []]


def make_manager(spec: BridgeSpec) -> Any:
    """An `AcceleratorManager` subclass answering from `spec`."""

    def visible_ids() -> list[str] | None:
        try:
            return visible_tokens(spec, os.environ.get(spec.visible_ids_env))
        except VisibilityError as e:
            # Raised inside Ray's resource resolution; keep the message clear.
            raise ValueError(str(e)) from None

    def set_visible(ids: list[str]) -> None:
        if os.environ.get(NOSET_PREFIX + spec.visible_ids_env, "").lower() in ("1", "true"):
            return
        os.environ[spec.visible_ids_env] = format_mask(ids)
        if spec.traits.reads_published_masks:
            # Only a backend that reads them gets them: a write per task start.
            masks.publish(os.environ[spec.visible_ids_env])

    def validate(quantity: float) -> tuple[bool, str | None]:
        if spec.whole_units_only and isinstance(quantity, float) and not quantity.is_integer():
            why = f"{spec.resource_name} resource quantity must be whole numbers: a core belongs to one process. "
            return False, f"{why}The specified quantity {quantity} is invalid."
        return True, None

    name = f"RayAccel{spec.resource_name.title().replace('_', '')}Manager"
    attrs = {
        "get_resource_name": staticmethod(lambda: spec.resource_name),
        "get_visible_accelerator_ids_env_var": staticmethod(lambda: spec.visible_ids_env),
        "get_current_node_num_accelerators": staticmethod(lambda: len(spec.unit_ids)),
        "get_current_node_accelerator_type": staticmethod(lambda: spec.accelerator_type),
        "get_current_node_additional_resources": staticmethod(lambda: None),
        "validate_resource_request_quantity": staticmethod(validate),
        "get_current_process_visible_accelerator_ids": staticmethod(visible_ids),
        "set_current_process_visible_accelerator_ids": staticmethod(set_visible),
        "get_ec2_instance_num_accelerators": staticmethod(lambda instance_type, instances: None),
        "get_ec2_instance_accelerator_type": staticmethod(lambda instance_type, instances: None),
        "ray_accel_spec": spec,
    }
    return type(name, (accelerators.manager_base(),), attrs)


def check_ray_version() -> str:
    """The running Ray's version, or `BridgeUnsupported` when it is outside
    the supported versions or lacks the registry the bridge replaces (found by
    feature)."""
    version = ray_version()
    if version == "not installed":
        raise BridgeUnsupported("ray is not installed")
    if ".".join(version.split(".")[:2]) not in SUPPORTED_RAY:
        raise BridgeUnsupported(
            f"ray {version} is outside the versions the ray-accel bridge supports "
            f"({SUPPORTED_RAY[0]}.x to {SUPPORTED_RAY[-1]}.x): the bridge is not installed"
        )
    try:
        accelerators.check_registry()
    except RayApiMissing as e:
        raise BridgeUnsupported(f"{e}: the bridge is not installed") from None
    return version


_installed: dict[str, type] = {}


def install(specs: Sequence[BridgeSpec]) -> None:
    """Put our managers in Ray's registry in this process. Idempotent."""
    check_ray_version()
    try:
        _installed.update((s.resource_name, make_manager(s)) for s in specs)
        accelerators.put_managers(_installed)
    except RayApiMissing as e:
        raise BridgeUnsupported(f"{e}: the bridge is not installed") from None


def unit_resources_env(specs: Sequence[BridgeSpec], current: str | None) -> str | None:
    """The value RAY_custom_unit_instance_resources needs, or None if unchanged.

    A resource Ray does not already treat per-instance would hand every task
    slot 0, so two tasks would share one device.
    """
    names = [n.strip() for n in (current or ",".join(RAY_DEFAULT_UNIT_RESOURCES)).split(",") if n.strip()]
    missing = [s.resource_name for s in specs if s.resource_name not in {*names, *PREDEFINED_UNIT_RESOURCES}]
    return ",".join(names + missing) if missing else None


def raylet_env(specs: Sequence[BridgeSpec], base: Mapping[str, str]) -> dict[str, str]:
    """Variables a raylet needs so that its workers install the bridge, and the
    variables every process using the devices needs (inherited by every
    worker of that raylet, whatever it runs)."""
    units = unit_resources_env(specs, base.get(UNIT_RESOURCES_ENV))
    env: dict[str, str] = {} if units is None else {UNIT_RESOURCES_ENV: units}
    env.update(pair for s in specs for pair in s.process_env)
    preload = [m for m in base.get(PRELOAD_ENV, "").split(",") if m]
    if AUTOINSTALL_MODULE not in preload:
        preload.append(AUTOINSTALL_MODULE)
    env[PRELOAD_ENV] = ",".join(preload)
    env[SPEC_ENV] = json.dumps(dump(specs))
    return env
