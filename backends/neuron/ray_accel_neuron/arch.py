"""What a Neuron device is: its generation, from whichever source can tell.

The strings come from the Neuron driver (aws-neuron/aws-neuron-driver @
fca19f7d, aws-neuronx-dkms 2.24.7.0): `ndhal_register_funcs_trn1/_inf2`
(`v2/neuron_dhal_v2.c`) and `_trn2` (`v3/neuron_dhal_v3.c`) write
`info/architecture/{arch_type,instance_type,device_name}`; `neuron_device.h`
has the PCI device ids (vendor 0x1d0f). Note that the sysfs `instance_type`
is a family ("Trn1"), never an EC2 instance type, and that `arch_type` NDv3
is both Inferentia2 and Trainium2: only `device_name`, the PCI device id or
the shape tell them apart. Memory sizes and core counts: the Neuron
documentation's `about-neuron/arch/neuron-hardware/*.rst`.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3


@dataclass(frozen=True)
class Generation:
    accelerator_type: str  # what Ray's `accelerator_type:` resource and label carry
    device_name: str  # sysfs info/architecture/device_name
    pci_device_ids: tuple[int, ...]
    physical_cores: int  # per device (sysfs core_count)
    memory_bytes: int  # per device; sysfs has no total, the hardware has one size
    default_lnc: int  # logical core size the runtime uses unless told otherwise
    instance_prefixes: tuple[str, ...]  # EC2 instance families with this device

    @property
    def supports_lnc(self) -> bool:
        # Logical NeuronCores exist on Trainium2 only (logical-neuroncore-config.rst).
        return self.default_lnc > 1


TRAINIUM = Generation("Trainium", "Trainium1", (0x7164,), 2, 32 * GIB, 1, ("trn1", "trn1n"))
INFERENTIA2 = Generation("Inferentia2", "Inferentia2", (0x7264,), 2, 32 * GIB, 1, ("inf2",))
TRAINIUM2 = Generation("Trainium2", "Trainium2", (0x7364,), 8, 96 * GIB, 2, ("trn2", "trn2n", "trn2u", "trn2p"))
# Inf1 (NDv1, 4 NeuronCore-v1, 8 GiB) is recognised so that it is named, not mistaken.
INFERENTIA = Generation("Inferentia", "Inferentia", (0x7064, 0x7065, 0x7066, 0x7067), 4, 8 * GIB, 1, ("inf1",))

GENERATIONS = (TRAINIUM, INFERENTIA2, TRAINIUM2, INFERENTIA)
NEURON_PCI_VENDOR = 0x1D0F

# Instance types a (generation, host device count) can only be; missing keys
# (16 Trainium: trn1 or trn1n; 16 Trainium2: trn2, trn2n, trn2u; 1
# Inferentia2: inf2.xlarge or inf2.8xlarge) are ambiguous.
UNIQUE_SHAPES = {
    (TRAINIUM, 1): "trn1.2xlarge",
    (INFERENTIA2, 6): "inf2.24xlarge",
    (INFERENTIA2, 12): "inf2.48xlarge",
    (TRAINIUM2, 1): "trn2.3xlarge",
}
AMBIGUOUS_SHAPES = {
    (TRAINIUM, 16): ("trn1.32xlarge", "trn1n.32xlarge"),
    (INFERENTIA2, 1): ("inf2.xlarge", "inf2.8xlarge"),
    (TRAINIUM2, 16): ("trn2.48xlarge", "trn2n.48xlarge", "trn2u.48xlarge"),
}


def from_device_name(name: str) -> Generation | None:
    """sysfs `info/architecture/device_name` ("Trainium1", "Inferentia2", ...)."""
    text = name.strip()
    return next((g for g in GENERATIONS if g.device_name == text), None)


def from_arch_type(arch_type: str) -> Generation | None:
    """sysfs device-level `arch_type`: decisive for NDv2 only (NDv3 is Inf2 or Trn2)."""
    return TRAINIUM if arch_type.strip() == "NDv2" else None


def from_pci_device_id(device_id: int) -> Generation | None:
    return next((g for g in GENERATIONS if device_id in g.pci_device_ids), None)


def from_instance_type(instance_type: str) -> Generation | None:
    """`trn1.32xlarge` -> Trainium; anything not a Neuron instance -> None."""
    family = instance_type.strip().lower().partition(".")[0]
    return next((g for g in GENERATIONS if family in g.instance_prefixes), None)


def from_monitor_type(device_type: str) -> Generation | None:
    """neuron-monitor `neuron_hardware_info.neuron_device_type` (trainium, inferentia2, trainium2)."""
    names = {"trainium": TRAINIUM, "inferentia2": INFERENTIA2, "trainium2": TRAINIUM2, "inferentia": INFERENTIA}
    return names.get(device_type.strip().lower())
