"""What a Neuron device is: its generation, from whichever source can tell.

The strings come from the Neuron driver: `ndhal_register_funcs_trn1/_inf2`
(`v2/neuron_dhal_v2.c`) and `_trn2` (`v3/neuron_dhal_v3.c`) in
aws-neuron/aws-neuron-driver @ fca19f7d (aws-neuronx-dkms 2.24.7.0), and
`ndhal_register_funcs_trn3` (`v4/neuron_dhal_v4.c`) in the same repository @
9cc489ec (aws-neuronx-dkms 2.30.2.0, shipped with Neuron 2.32). They write
`info/architecture/{arch_type,instance_type,device_name}`; `neuron_device.h`
has the PCI device ids (vendor 0x1d0f). Note that the sysfs `instance_type`
is a family ("Trn1"), never an EC2 instance type, and that `arch_type` NDv3
is both Inferentia2 and Trainium2: only `device_name`, the PCI device id or
the shape tell them apart. Memory sizes and core counts: the Neuron
documentation's `about-neuron/arch/neuron-hardware/*.rst`.

A device this table does not know is not an error: `reported` makes a
generation of what the device calls itself, with every fact the table would
give left unknown, so discovery goes on with what the machine shows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GIB = 1024**3

# Fabrics: how the devices of one host are linked.
TABLE = "table"  # the driver's `connected_devices` lists each device's links
ALL_TO_ALL = "all-to-all"  # every device reaches every other through a switch


@dataclass(frozen=True, kw_only=True)
class Generation:
    accelerator_type: str  # what Ray's `accelerator_type:` resource and label carry
    device_name: str  # sysfs info/architecture/device_name
    pci_device_ids: tuple[int, ...]
    physical_cores: int | None  # per device (sysfs core_count); None: not known
    memory_bytes: int | None  # per device; sysfs has no total, the hardware has one size
    default_lnc: int | None  # logical core size the runtime uses unless told otherwise; None: not known
    instance_prefixes: tuple[str, ...]  # EC2 instance families with this device
    arch_types: tuple[str, ...] = ()  # device-level sysfs arch_type ("ND" + the driver's suffix)
    fabric: str = TABLE
    known: bool = True  # False: made by `reported` from a name this table does not hold

    @property
    def supports_lnc(self) -> bool:
        # Logical NeuronCores exist on Trainium2 and Trainium3
        # (logical-neuroncore-config.rst); of an unknown device nothing is known.
        return self.default_lnc is None or self.default_lnc > 1


TRAINIUM = Generation(
    accelerator_type="Trainium",
    device_name="Trainium1",
    pci_device_ids=(0x7164,),
    physical_cores=2,
    memory_bytes=32 * GIB,
    default_lnc=1,
    instance_prefixes=("trn1", "trn1n"),
    arch_types=("NDv2",),
)
INFERENTIA2 = Generation(
    accelerator_type="Inferentia2",
    device_name="Inferentia2",
    pci_device_ids=(0x7264,),
    physical_cores=2,
    memory_bytes=32 * GIB,
    default_lnc=1,
    instance_prefixes=("inf2",),
    arch_types=("NDv3",),
)
TRAINIUM2 = Generation(
    accelerator_type="Trainium2",
    device_name="Trainium2",
    pci_device_ids=(0x7364,),
    physical_cores=8,
    memory_bytes=96 * GIB,
    default_lnc=2,
    instance_prefixes=("trn2", "trn2n", "trn2u", "trn2p"),
    arch_types=("NDv3",),
)
# Trainium3 (driver 2.30.2.0: NDv4/NCv4/Trn3/Trainium3, TRN3_DEVICE_ID0/1 =
# 0x7564/0x7565; `v4/address_map.h`: 2 dies x 2 SENGs x 2 NCs = 8 physical
# cores, 4 HBM stacks of 36 GiB = 144 GiB, as trainium3.rst says).
# Default LNC 2: only TorchNeuron's pre-release source says so
# (`torch_neuronx/csrc/core/utils/PlatformUtils.cpp` maps NRT_INSTANCE_TRN3
# and NRT_INSTANCE_TRN3PDS98 to "2"); the Neuron LNC page says LNC applies to
# Trn2 and Trn3 but states the default for Trn2 only. NEURON_LOGICAL_NC_CONFIG
# overrides it.
# Instance families: every name is known only from the driver's own tables
# (`v4_platform_map`, `ndhal_instance_type_3xl` in `v4/neuron_dhal_v4.c`)
# and "trn3pds" from a public test harness; the Neuron docs name no
# Trainium3 instance type.
# Fabric: all to all through NeuronSwitch-v1 (trn3-arch.rst: "Both
# configurations use NeuronSwitch-v1 interconnect technology to enable
# all-to-all connectivity between chips"). The driver's `connected_devices`
# is not used on Trainium3: `fw_io_topology_v3` (`v3/neuron_dhal_v3.c`,
# reused by V4) prints the Trn2 torus table for it on 16-device hosts under
# "TODO PDS update", and an empty line on others.
TRAINIUM3 = Generation(
    accelerator_type="Trainium3",
    device_name="Trainium3",
    pci_device_ids=(0x7564, 0x7565),
    physical_cores=8,
    memory_bytes=144 * GIB,
    default_lnc=2,
    instance_prefixes=(
        "trn3",
        "trn3e",
        "trn3e-dev0",
        "trn3-dev0",
        "trn3-dev1",
        "trn3s-es",
        "trn3sn",
        "trn3sn-es",
        "trn3p",
        "trn3pd98",
        "trn3pds",
    ),
    arch_types=("NDv4",),
    fabric=ALL_TO_ALL,
)
# Inf1 (NDv1, 4 NeuronCore-v1, 8 GiB) is recognised so that it is named, not mistaken.
INFERENTIA = Generation(
    accelerator_type="Inferentia",
    device_name="Inferentia",
    pci_device_ids=(0x7064, 0x7065, 0x7066, 0x7067),
    physical_cores=4,
    memory_bytes=8 * GIB,
    default_lnc=1,
    instance_prefixes=("inf1",),
    arch_types=("NDv1",),
)

GENERATIONS = (TRAINIUM, INFERENTIA2, TRAINIUM2, TRAINIUM3, INFERENTIA)
NEURON_PCI_VENDOR = 0x1D0F

# Instance types a (generation, host device count) can only be; missing keys
# are ambiguous: 16 Trainium: trn1 or trn1n; 16 Trainium2: trn2, trn2n,
# trn2u; 1 Inferentia2: inf2.xlarge or inf2.8xlarge; every Trainium3 shape
# (the driver knows several names for each, and which are sold is not
# published).
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
    # v4_platform_map (PDS, ULTRASERVER), MAX, and ndhal_instance_type_3xl.
    (TRAINIUM3, 16): (
        "trn3.48xlarge",
        "trn3-dev0.48xlarge",
        "trn3-dev1.48xlarge",
        "trn3s-es.48xlarge",
        "trn3sn.48xlarge",
        "trn3sn-es.48xlarge",
        "trn3p.48xlarge",
    ),
    (TRAINIUM3, 4): ("trn3e.24xlarge", "trn3e-dev0.24xlarge"),
    (TRAINIUM3, 1): ("trn3pd98.3xlarge", "trn3s-es.3xlarge", "trn3sn.3xlarge", "trn3sn-es.3xlarge"),
}

# A Ray label value (Ray 2.60 `label_utils.LABEL_REGEX`): the accelerator
# type becomes the `ray-accel.io/accelerator-type` label and Ray's
# `accelerator_type:<T>` resource.
_LABEL_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
MAX_TYPE_LEN = 63


def safe_type(name: str) -> str | None:
    """What a device calls itself, as an accelerator type Ray can carry:
    runs of other characters become '-', the ends are letters or digits, at
    most 63 characters; None when nothing is left."""
    text = _LABEL_SAFE.sub("-", name.strip())[:MAX_TYPE_LEN]
    text = text.strip("-_.")
    return text or None


def reported(name: str) -> Generation | None:
    """A generation for a device name this table does not know: its type is
    the name (made label-safe), every other fact unknown."""
    kind = safe_type(name)
    if kind is None:
        return None
    return Generation(
        accelerator_type=kind,
        device_name=name.strip(),
        pci_device_ids=(),
        physical_cores=None,
        memory_bytes=None,
        default_lnc=None,
        instance_prefixes=(),
        known=False,
    )


def from_device_name(name: str) -> Generation | None:
    """sysfs `info/architecture/device_name` ("Trainium1", "Inferentia2", ...)."""
    text = name.strip()
    return next((g for g in GENERATIONS if g.device_name == text), None)


def with_arch_type(arch_type: str) -> tuple[Generation, ...]:
    """The generations whose devices write this device-level `arch_type`:
    one for NDv2 and NDv4, two for NDv3 (Inferentia2, Trainium2), none for a
    string the table does not hold."""
    text = arch_type.strip()
    return tuple(g for g in GENERATIONS if text in g.arch_types)


def from_pci_device_id(device_id: int) -> Generation | None:
    return next((g for g in GENERATIONS if device_id in g.pci_device_ids), None)


def from_instance_type(instance_type: str) -> Generation | None:
    """`trn1.32xlarge` -> Trainium; anything not a Neuron instance -> None."""
    family = instance_type.strip().lower().partition(".")[0]
    return next((g for g in GENERATIONS if family in g.instance_prefixes), None)
