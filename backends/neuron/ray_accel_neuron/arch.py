"""What a Neuron device is, from the names the driver and tools print."""

from __future__ import annotations

import os
from dataclasses import dataclass

GIB = 1024**3
LNC_ENV = "NEURON_LOGICAL_NC_CONFIG"


@dataclass(frozen=True)
class Arch:
    accelerator_type: str  # what Ray's `accelerator_type:` resource and label carry
    memory_bytes: int  # per device; sysfs has no total, the hardware has one size
    default_lnc: int  # logical core size the runtime uses unless told otherwise


TRAINIUM = Arch("Trainium", 32 * GIB, 1)
TRAINIUM2 = Arch("Trainium2", 96 * GIB, 2)
INFERENTIA2 = Arch("Inferentia2", 32 * GIB, 1)
INFERENTIA = Arch("Inferentia", 8 * GIB, 1)


def classify(*names: str | None) -> Arch | None:
    """From device_name, arch_type or instance type, in that order of trust."""
    for raw in names:
        name = (raw or "").lower().replace(" ", "")
        if not name:
            continue
        if "trainium2" in name or name.startswith("trn2") or name == "ncv3":
            return TRAINIUM2
        if "trainium" in name or name.startswith("trn1") or name == "ncv2":
            return TRAINIUM
        if "inferentia2" in name or name.startswith("inf2"):
            return INFERENTIA2
        if "inferentia" in name or name.startswith("inf1"):
            return INFERENTIA
    return None


def logical_core_size(arch: Arch, environ: dict[str, str] | None = None) -> int:
    """trn2 groups physical cores into logical ones (2 by default); the runtime
    numbers NEURON_RT_VISIBLE_CORES in logical cores."""
    env = os.environ if environ is None else environ
    value = env.get(LNC_ENV)
    if value and value.strip().isdigit() and int(value) > 0:
        return int(value)
    return arch.default_lnc
