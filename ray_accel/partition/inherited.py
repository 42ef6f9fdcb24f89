"""Planning within a mask the environment already sets.

Under Slurm, a container runtime or a shared host, the backend's visibility
variable is set before ray-accel runs: that is the part of the
host this job was given. Discovery still sees the whole host (the backend lists
every device, ignoring masks), but a plan covers only what the mask shows: a
device partly shown keeps only its shown cores, and a manual spec that names a
device outside the mask is refused. A mask that cannot be read is the user's
input, an error naming it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ray_accel.core.devices import Device
from ray_accel.core.errors import InputError
from ray_accel.core.visibility import VisibilityError, format_visible_ids
from ray_accel.partition.plan import MaskView, PartitionError, Plan, plan_partitions
from ray_accel.plugins.interface import DevicePlugin
from ray_accel.plugins.traits import DeviceTraits


@dataclass(frozen=True)
class InheritedMask:
    env: str
    value: str
    ids: tuple[int, ...]  # the schedulable ids it shows, in the host's numbering
    resource_name: str

    def view(self, devices: Sequence[Device]) -> MaskView:
        """The mask as `plan` shows it, among the host's `devices` (each has a core)."""
        ids = set(self.ids)
        shown = tuple(d.id for d in devices if ids & set(d.core_ids))
        whole = sum(1 for d in devices if set(d.core_ids) <= ids)
        partly = len(shown) - whole
        extra = f", {partly} partly" if partly else ""
        units = sum(len(d.core_ids) for d in devices)
        told = (
            f"inherited mask {self.env}={self.value}: planning over {len(self.ids)} of {units} "
            f"{self.resource_name} ({whole} of {len(devices)} devices{extra})"
        )
        return MaskView(self.env, self.value, self.ids, shown, told)


def inherited_mask(plugin: DevicePlugin, environ: Mapping[str, str]) -> InheritedMask | None:
    """The mask set for `plugin`'s family in `environ`, read by the plugin
    (ids or UUIDs, ranges); None when unset. A bad value is an InputError
    naming the variable and the value."""
    env = plugin.visible_ids_env
    value = environ.get(env)
    if value is None:
        return None
    try:
        ids = plugin.parse_visible(value)
    except VisibilityError as e:
        raise InputError(f"{env}={value!r} set in the environment cannot be read: {e}") from None
    known = {c for d in plugin.list_devices() for c in d.core_ids}
    unknown = [i for i in ids or [] if i not in known]
    if unknown:
        raise InputError(f"{env}={value!r} set in the environment names {unknown[0]}, which this host does not have")
    return InheritedMask(env, value, tuple(sorted(ids or [])), plugin.resource_name)


def restrict(devices: Sequence[Device], mask: InheritedMask) -> list[Device]:
    """The devices the mask shows, each with only its shown cores."""
    shown = set(mask.ids)
    out = []
    for d in devices:
        cores = tuple(c for c in d.core_ids if c in shown)
        if cores:
            out.append(d if cores == d.core_ids else dataclasses.replace(d, core_ids=cores))
    return out


def plan_within_mask(
    devices: Sequence[Device],
    mode: str,
    partitions: int | None = None,
    manual: str | None = None,
    mask: InheritedMask | None = None,
    default_type: str | None = None,
    *,
    traits: DeviceTraits,
) -> Plan:
    """`plan_partitions` over what `mask` shows (everything when None): the
    mask's part of the host and its view made first, then the plan."""
    shown, notes, view = devices, [], None
    if mask is not None:
        shown = restrict(devices, mask)
        if not shown:
            raise PartitionError(f"{mask.env}={mask.value!r} set in the environment shows no device: nothing to plan")
        notes = [
            f"device {d.id} is partly inside {mask.env}: only core(s) {format_visible_ids(d.core_ids, 'ranges')}"
            for d in shown
            if d not in devices  # `restrict` kept only some of its cores
        ]
        view = mask.view(devices)
        if manual is not None:
            # Resolve the spec against the whole host first, so a device outside
            # the mask is named as such rather than as unknown.
            whole = plan_partitions(devices, mode, partitions, manual, default_type, traits=traits)
            kept = {d.id for d in shown}
            for part in whole:
                for did in part.device_ids:
                    if did not in kept:
                        raise PartitionError(
                            f"partition {part.name!r}: device {did} is outside the inherited mask "
                            f"{mask.env}={mask.value} (it shows {format_visible_ids(mask.ids, 'ranges') or 'nothing'})"
                        )
    plan = plan_partitions(shown, mode, partitions, manual, default_type, traits=traits)
    return dataclasses.replace(plan, warnings=(*plan.warnings, *notes), mask=view)
