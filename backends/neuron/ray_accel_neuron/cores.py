"""The one rule for NeuronCore numbering, used by every discovery path.

Facts (the Neuron documentation: logical-neuroncore-config.rst,
neuron-ls.rst, the runtime configuration guide):

- sysfs `core_count` and the `neuron_coreN` directories count *physical*
  cores (2 on Trainium and Inferentia2, 8 on Trainium2 and Trainium3).
- The runtime, `NEURON_RT_VISIBLE_CORES` and every LNC-aware tool count
  *logical* cores: a logical core is 1 or 2 physical ones
  (`NEURON_LOGICAL_NC_CONFIG`, default 2 on Trainium2 and, by TorchNeuron's
  pre-release source only, on Trainium3; 1 elsewhere; see `arch`).
  `neuron-ls` prints `nc_count` already in logical cores, with
  `logical_neuroncore_config` on Trainium2: it is never divided again.
- Logical ids are global, by device index: device i holds
  i*n .. i*n+n-1, also inside a container that sees only some devices
  (the runtime keeps host numbering there).
- A device whose generation is unknown has no known default: the user's
  variable, the tool or the EKS node file decide, else one logical core per
  physical core, said in a warning (`Lnc.assumed`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ray_accel_neuron import limits
from ray_accel_neuron.arch import Generation

LNC_ENV = "NEURON_LOGICAL_NC_CONFIG"


class InconsistentCores(limits.BadData):
    """Core counts from the machine that contradict each other; names the values."""


@dataclass(frozen=True)
class Lnc:
    """The logical core size the workers will run with, and why."""

    size: int
    source: str
    explicit: bool  # set by the user (NEURON_LOGICAL_NC_CONFIG), so it wins over the tool
    assumed: bool = False  # no source and no known default: logical = physical


@dataclass(frozen=True)
class Numbering:
    ids: tuple[int, ...]
    physical: int
    lnc: int
    source: str
    warnings: tuple[str, ...] = ()


def global_ids(index: int, per_device: int) -> tuple[int, ...]:
    """The runtime's ids of device `index` when every device has `per_device` logical cores."""
    return tuple(range(index * per_device, index * per_device + per_device))


def worker_lnc(
    generation: Generation | None, env_lnc: int | None, tool_lnc: int | None, file_lnc: int | None
) -> tuple[Lnc, tuple[str, ...]]:
    """The LNC the workers get: the user's variable, else what neuron-ls says is
    current, else the EKS node file, else the generation's default."""
    if generation is not None and not generation.supports_lnc:
        if env_lnc not in (None, 1):
            return Lnc(1, f"{generation.accelerator_type} has no logical cores", False), (
                f"{LNC_ENV}={env_lnc} ignored: {generation.accelerator_type} has no logical NeuronCores",
            )
        return Lnc(1, f"{generation.accelerator_type} has no logical cores", False), ()
    if env_lnc is not None:
        return Lnc(env_lnc, LNC_ENV, True), ()
    if tool_lnc is not None:
        return Lnc(tool_lnc, "neuron-ls logical_neuroncore_config", False), ()
    if file_lnc is not None:
        return Lnc(file_lnc, "logical_nc_config file", False), ()
    if generation is not None and generation.default_lnc is not None:
        return Lnc(generation.default_lnc, f"default for {generation.accelerator_type}", False), ()
    what = "no generation known" if generation is None else f"no known default for {generation.accelerator_type}"
    return Lnc(1, f"{what}: logical = physical", False, assumed=True), ()


def _divide(physical: int, lnc: int, what: str) -> int:
    if physical % lnc:
        raise InconsistentCores(f"{what}: {physical} physical cores do not divide into logical cores of size {lnc}")
    return limits.logical_cores(physical // lnc, f"{what}: logical cores")


def number(
    index: int,
    lnc: Lnc,
    *,
    physical: int | None = None,
    physical_source: str = "sysfs",
    nc_count: int | None = None,
    tool_lnc: int | None = None,
    given_ids: tuple[int, ...] | None = None,
) -> Numbering:
    """Core ids of device `index` from whatever was read: sysfs's physical
    count, neuron-ls's logical `nc_count` (with its LNC and ids), or both."""
    what = f"neuron:{index}"
    if nc_count is None:
        if physical is None:
            raise InconsistentCores(f"{what}: no core count from any source")
        per = _divide(physical, lnc.size, what)
        return Numbering(global_ids(index, per), physical, lnc.size, f"{physical_source} (physical / LNC {lnc.size})")
    # The tool's nc_count is logical at the tool's own LNC; without the key
    # (Trainium, tools before 2.21) the tool ran with the LNC we resolved.
    at = tool_lnc if tool_lnc is not None else lnc.size
    from_tool = nc_count * at
    if physical is not None and physical != from_tool:
        raise InconsistentCores(
            f"{what}: {physical_source} says {physical} physical cores, but neuron-ls nc_count {nc_count} "
            f"at logical_neuroncore_config {at} means {from_tool}"
        )
    physical = limits.physical_cores(from_tool, f"{what}: physical cores")
    if at != lnc.size:
        per = _divide(physical, lnc.size, what)
        return Numbering(
            global_ids(index, per),
            physical,
            lnc.size,
            f"neuron-ls nc_count renumbered for LNC {lnc.size}",
            (
                f"{what}: neuron-ls counted at logical_neuroncore_config {at}, workers run with "
                f"{LNC_ENV}={lnc.size}: {per} cores per device, renumbered",
            ),
        )
    formula = global_ids(index, nc_count)
    if given_ids is None:
        return Numbering(formula, physical, lnc.size, "neuron-ls nc_count (ids by device index)")
    if given_ids != formula:
        return Numbering(
            given_ids,
            physical,
            lnc.size,
            "neuron-ls neuroncore_ids",
            (f"{what}: neuron-ls neuroncore_ids {list(given_ids)} differ from index x nc_count {list(formula)}: kept",),
        )
    return Numbering(given_ids, physical, lnc.size, "neuron-ls neuroncore_ids")
