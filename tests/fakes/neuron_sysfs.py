"""Fake Neuron sysfs trees.

Two builders live here:

``build_tree(root, instance, ...)``
    A fake ``/sys`` (plus a fake ``/dev``) laid out the way the Neuron driver
    lays it out. Every name, content format and mode below follows the driver
    source of aws-neuron/aws-neuron-driver at commit
    fca19f7df31b44cbbffaf121230a66df6f59d118 (``dkms.conf`` PACKAGE_VERSION
    2.24.7.0, "Extracted contents of aws-neuronx-dkms-2.24.7.0"):

    * ``neuron_cdev.c`` ``ncdev_init_device_node``: ``device_create(neuron_dev_class,
      NULL /* no parent device */, ...)`` with class ``neuron_device``, so the
      nodes live at ``/sys/devices/virtual/neuron_device/neuronN`` (linked from
      ``/sys/class/neuron_device/neuronN``) and have **no** ``device`` link and
      **no** ``numa_node``.
    * ``neuron_cdev.c``: ``core_count`` is ``DEVICE_ATTR(core_count, S_IRUSR)`` (0400)
      and prints ``"%d"`` with no newline; ``connected_devices`` is ``S_IRUSR``
      (0400) and prints ``"12, 3, 4, 1\\n"`` or ``"\\n"``; ``reset`` is
      ``S_IWUSR | S_IRUSR`` (0600). Class attributes ``node_id_2``, ``node_id_4``,
      ``server_id_2``, ``server_id_4``, ``ultraserver_mode`` are ``S_IRUGO``.
    * ``neuron_sysfs_metrics.c``: every metric attribute is ``S_IWUSR | S_IRUGO``
      (0644); counters are directories holding ``total`` and ``present`` (memory
      counters also ``peak``), each ``"%llu\\n"``; ``info/architecture/*`` prints
      ``"%s\\n"`` of "ND"/"NC" + suffix, the instance family and the device name;
      ``info/serial_number`` prints ``"%016llx\\n"``; ``stats/hardware/*ecc*``
      are plain files (``"%u\\n"``), not counter directories; ``stats/power/utilization``
      is ``"<status>,<epoch>,<min>,<max>,<avg>\\n"`` (``neuron_power.c``).
    * ``neuron_mempool.c``: device memory counters are bumped with
      ``nsysfsmetric_inc_counter`` (``total += size``, ``present = size``,
      ``peak = max(total)``), so ``device_mem/total`` is the memory in use and
      ``present`` is only the size of the last allocation or free.
    * ``v2/neuron_dhal_v2.c`` / ``v3/neuron_dhal_v3.c``: architecture strings
      (Trn1: NDv2/NCv2/Trn1/Trainium1; Inf2: NDv3/NCv2/Inf2/Inferentia2;
      Trn2: NDv3/NCv3/Trn2/Trainium2), ``nc_per_device`` (v2: 2, v3: 8 physical
      cores; ``core_count`` counts physical cores, never logical ones), and the
      hard-coded topology tables of ``fw_io_topology_v2/v3`` (computed from the
      host's total device count, never from what a container can see).
    * ``neuron_pci.c`` / ``neuron_device.h``: PCI vendor 0x1d0f, device ids
      0x7164 (Trn1), 0x7264 (Inf2), 0x7364 (Trn2); ``neuron_pci_get_device_id_v2``
      takes the device index from the device's routing id, so the index is not
      the PCI probe or BDF order.
    * ``preinstall``: udev rule ``KERNEL=="neuron*", MODE="0666"`` for ``/dev/neuronN``.

    Trainium3 follows the same repository @ 9cc489ec99db2512006aa5b665b50e0c77132a59
    (``dkms.conf`` 2.30.2.0, the driver of Neuron 2.32): ``v4/neuron_dhal_v4.c``
    ``ndhal_register_funcs_trn3`` (NDv4/NCv4/Trn3/Trainium3), ``v4/address_map.h``
    (8 physical cores), ``neuron_device.h`` ``TRN3_DEVICE_ID0`` 0x7564;
    ``fw_io_topology_v3`` (reused by V4) lists the Trn2 torus table as
    ``connected_devices`` on a 16-device host ("TODO PDS update") and nothing
    on 4- or 1-device hosts; ``neuron_sysfs_metrics.c`` adds
    ``stats/hardware/health_status/{unhealthy_components,healthcheck_heartbeat,
    hw_error_event}`` (``S_IRUGO``, 0444) where ``health_status_enabled`` (V4 only).
    Its instance shapes are the driver's (``v4_platform_map``: trn3.48xlarge
    16 devices, trn3e.24xlarge 4; ``ndhal_instance_type_3xl``:
    trn3pd98.3xlarge 1). No neuron-ls output of a Trainium3 host is
    published, so its PCI BDFs are placeholders (``0000:NN:00.0``, NUMA
    node -1): tests must not treat them as facts.

    ``layout="unrecognised"`` builds the tree a driver with another layout
    would show as far as anything is known: each ``neuronN`` with only what
    the kernel's device model writes for any class device (``dev``,
    ``uevent``, ``subsystem``) and none of the driver's own nodes. Driver
    2.31 moved sysfs nodes to paths that are not published, so no
    new-layout tree is invented.

    PCI BDFs, NUMA nodes and CPU lists per device come from the neuron-ls
    fixtures in ``tests/fixtures/neuron/neuron-ls`` (see CATALOGUE.md there),
    laid out as the generic kernel PCI sysfs does (``/sys/bus/pci/devices/<bdf>``
    -> ``/sys/devices/pci0000:00/<bdf>`` with ``vendor``, ``device``,
    ``numa_node``, ``local_cpulist``, ``driver`` -> ``bus/pci/drivers/neuron``).
    The driver itself reads ``/sys/class/dmi/id/product_name`` for the EC2
    instance type (``ndhal_instance_type_pod`` in ``v3/neuron_dhal_v3.c``); the
    fake writes it only when asked.

    Not modelled (not needed for discovery, or content unknown): ``power/``
    runtime-PM files, ``dynamic`` ``new_metric_N`` nodes, ``tensor_engine``
    row-group count (four rows are written), the value of ``reset``.

``make_tree(root, preset, ecc_uncorrected=None)``
    The layout the existing tests were written against. Kept unchanged so its
    callers keep working; it is *not* faithful to the driver (instance_type is
    the preset name instead of "Trn1"/"Inf2"/"Trn2", device_name "Trainium"
    instead of "Trainium1", arch_type "NCv2" at device level instead of "NDv2",
    ECC files as counter directories, a ``mem_ecc_corrected`` the driver does
    not create, serials "SN000000" instead of 16 hex digits, all modes 0644).
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import io
import json
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ray_accel_mock.spec import load_spec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "neuron" / "neuron-ls"


# ---------------------------------------------------------------------------
# The faithful builder
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Generation:
    name: str
    pci_device_id: int  # neuron_device.h
    nc_per_device: int  # physical cores: v2/address_map.h V2_NC_PER_DEVICE, v3 V3_NC_PER_DEVICE
    nd_arch_type: str  # info/architecture/arch_type: "ND" + arch_nd_type_suffix
    nc_arch_type: str  # neuron_coreN/info/architecture/arch_type: "NC" + arch_nc_type_suffix
    instance_family: str  # info/architecture/instance_type: arch_instance_suffix
    device_name: str  # info/architecture/device_name: arch_device_name_suffix


# ndhal_register_funcs_trn1 / _inf2 (v2/neuron_dhal_v2.c), _trn2 (v3/neuron_dhal_v3.c)
TRN1 = Generation("trn1", 0x7164, 2, "NDv2", "NCv2", "Trn1", "Trainium1")
INF2 = Generation("inf2", 0x7264, 2, "NDv3", "NCv2", "Inf2", "Inferentia2")
TRN2 = Generation("trn2", 0x7364, 8, "NDv3", "NCv3", "Trn2", "Trainium2")
# ndhal_register_funcs_trn3 (v4/neuron_dhal_v4.c, 2.30.2.0)
TRN3 = Generation("trn3", 0x7564, 8, "NDv4", "NCv4", "Trn3", "Trainium3")
HEALTH_GENERATIONS = (TRN3,)  # health_status_enabled: set in ndhal_register_funcs_v4 only

# instance -> (generation, device count): Neuron docs inf2-arch.rst, trn1-arch.rst,
# trn2-arch.rst; trn2.3xlarge (one Trainium2) from the trn2.3xlarge neuron-ls capture.
INSTANCES: dict[str, tuple[Generation, int]] = {
    "trn1.2xlarge": (TRN1, 1),
    "trn1.32xlarge": (TRN1, 16),
    "inf2.xlarge": (INF2, 1),
    "inf2.8xlarge": (INF2, 1),
    "inf2.24xlarge": (INF2, 6),
    "inf2.48xlarge": (INF2, 12),
    "trn2.3xlarge": (TRN2, 1),
    "trn2.48xlarge": (TRN2, 16),
    # v4/neuron_dhal_v4.c: v4_pds_routing_id_to_user_id (16), v4_max_routing_id_to_user_id (4),
    # ndhal_instance_type_3xl (one device, routing id 0).
    "trn3.48xlarge": (TRN3, 16),
    "trn3e.24xlarge": (TRN3, 4),
    "trn3pd98.3xlarge": (TRN3, 1),
}

# v3/neuron_dhal_v3.c trn2_32xl_neigbor_ids: one row per device, one column per
# SENG. The same 4x4 torus as Trn1, listed in another order.
_TRN2_LINKS = (
    (12, 1, 3, 4),
    (0, 13, 5, 2),
    (14, 3, 1, 6),
    (2, 15, 7, 0),
    (8, 5, 7, 0),
    (4, 9, 1, 6),
    (10, 7, 5, 2),
    (6, 11, 3, 4),
    (4, 9, 11, 12),
    (8, 5, 13, 10),
    (6, 11, 9, 14),
    (10, 7, 15, 8),
    (0, 13, 15, 8),
    (12, 1, 9, 14),
    (2, 15, 13, 10),
    (14, 3, 11, 12),
)

STATUS_COUNTERS = (  # neuron_sysfs_metrics.c status_counter_nodes_info_tbl
    "success",
    "failure",
    "timeout",
    "exec_bad_input",
    "hw_error",
    "execute_completed_with_error",
    "execute_completed_with_num_error",
    "generic_error",
    "resource_error",
    "resource_nc_error",
    "execute_failed_to_queue",
    "invalid_error",
    "unsupported_neff_version",
    "oob_error",
    "hw_collectives_error",
    "hw_hbm_ue_error",
    "hw_nc_ue_error",
    "hw_dma_abort_error",
    "execute_sw_nq_overflow",
    "execute_sw_semaphore_error",
    "execute_sw_event_error",
    "execute_sw_psum_collision",
    "execute_sw_sequencer_fatal",
    "hw_repairable_hbm_ue_error",
)
DEVICE_MEM_CATEGORIES = (  # device_mem_category_counter_nodes_info_tbl
    "model_code",
    "tensors",
    "constants",
    "model_shared_scratchpad",
    "runtime_memory",
    "driver_memory",
    "collectives",
    "nonshared_scratchpad",
    "notifications",
    "dma_rings",
    "uncategorized",
)
HOST_MEM_CATEGORIES = (  # host_mem_category_counter_nodes_info_tbl
    "dma_buffers",
    "tensors",
    "constants",
    "application_memory",
    "driver_memory",
    "notifications",
    "dma_rings",
    "uncategorized",
)
OTHER_INFO_COUNTERS = (  # custom_counter_nodes_info_tbl
    "model_load_count",
    "reset_req_count",
    "reset_fail_count",
    "inference_count",
    "flop_count",
    "nc_time_in_use",
)
ECC_FILES = ("sram_ecc_uncorrected", "mem_ecc_uncorrected", "mem_ecc_repairable_uncorrected")
CLASS_ATTRS = ("node_id_2", "node_id_4", "server_id_2", "server_id_4", "ultraserver_mode")

ROOT_ONLY_FILES = ("core_count", "connected_devices", "reset")  # neuron_cdev.c modes 0400/0400/0600
MODE_DIR = 0o755  # kobject directories
MODE_METRIC = 0o644  # S_IWUSR | S_IRUGO (nsysfsmetric_create_attr)
MODE_RO_ALL = 0o444  # S_IRUGO: class attributes, `dev`, PCI vendor/device/local_cpulist, DMI product_name
MODE_DEV_NODE = 0o666  # preinstall udev rule
UNPRIVILEGED_UID = 65534  # nobody


def driver_links(gen: Generation, total: int, index: int) -> tuple[int, ...]:
    """``connected_devices`` of device ``index`` on a host with ``total`` devices
    (fw_io_topology_v2 / fw_io_topology_v3)."""
    if gen in (TRN1, TRN2, TRN3) and total % 16 == 0:
        if gen is TRN1:
            # trn1_32xl_neigbor_ids: up, left, down, right on a 4x4 torus, row-major.
            r, c = divmod(index % 16, 4)
            row = ((r - 1) % 4 * 4 + c, r * 4 + (c - 1) % 4, (r + 1) % 4 * 4 + c, r * 4 + (c + 1) % 4)
        else:
            row = _TRN2_LINKS[index % 16]
        return tuple(p | (0x10 & index) for p in row)
    if gen is INF2 and total == 12:  # inf2_48xl_neighbor_ids: a ring
        return ((index - 1) % 12, (index + 1) % 12)
    if gen is INF2 and total == 6:  # inf2_24xl_neighbor_ids: a line, ends have one link
        return tuple(p for p in (index - 1, index + 1) if 0 <= p < 6)
    return ()


LAYOUTS = ("2.30", "unrecognised")


def connected_devices_text(links: Iterable[int]) -> str:
    """neuron_connected_devices_show: "a, b, c\\n", or "\\n" when there are none."""
    return ", ".join(str(p) for p in links) + "\n"


def full_bdf(bdf: str) -> str:
    return bdf.lower() if bdf.count(":") == 2 else f"0000:{bdf.lower()}"


@dataclass(frozen=True)
class PciInfo:
    bdf: str
    numa_node: int
    local_cpulist: str


def fixture_pci(instance: str) -> dict[int, PciInfo]:
    """BDF, NUMA node and CPU list per device from the instance's neuron-ls fixture."""
    path = FIXTURES / f"{instance}.json"
    out = {}
    for entry in json.loads(path.read_text()):
        out[int(entry["neuron_device"])] = PciInfo(
            bdf=full_bdf(entry["bdf"]),
            numa_node=int(entry.get("numa_node", "-1")),
            local_cpulist=entry.get("cpu_affinity", ""),
        )
    return out


def placeholder_pci(total: int) -> dict[int, PciInfo]:
    """BDFs for a host no published neuron-ls output describes: placeholders."""
    return {i: PciInfo(f"0000:{0x10 + i:02x}:00.0", -1, "") for i in range(total)}


@dataclass(frozen=True)
class NeuronSysfs:
    """Paths of one fake tree. ``neuron_root`` is what RAYACCEL_NEURON_SYSFS_ROOT names."""

    sys_root: Path
    dev_root: Path
    instance: str
    generation: Generation
    host_devices: int
    sysfs_devices: tuple[int, ...]
    dev_nodes: tuple[int, ...]
    pci: Mapping[int, PciInfo]
    dev_node_kind: str  # "char" (mknod worked) or "file"
    root_only: tuple[Path, ...] = field(default=())

    @property
    def neuron_root(self) -> Path:
        return self.sys_root / "devices" / "virtual" / "neuron_device"

    @property
    def class_root(self) -> Path:
        return self.sys_root / "class" / "neuron_device"

    @property
    def pci_devices(self) -> Path:
        return self.sys_root / "bus" / "pci" / "devices"

    @property
    def dmi_product_name(self) -> Path:
        return self.sys_root / "devices" / "virtual" / "dmi" / "id" / "product_name"

    def device_dir(self, index: int) -> Path:
        return self.neuron_root / f"neuron{index}"

    def core_dir(self, index: int, core: int) -> Path:
        return self.device_dir(index) / f"neuron_core{core}"

    def dev_node(self, index: int) -> Path:
        return self.dev_root / f"neuron{index}"

    # -- what changes on a running host, between two polls -----------------

    def ecc_file(self, index: int, name: str) -> Path:
        return self.device_dir(index) / "stats" / "hardware" / name

    def set_ecc(self, index: int, name: str, count: int) -> None:
        """An uncorrected ECC counter now reads `count` ("%u\n", as
        `neuron_sysfs_metrics.c` prints `ecc_attrs_info_tbl`'s files)."""
        if name not in ECC_FILES:
            raise ValueError(f"{name!r} is not one of the driver's ECC files {ECC_FILES}")
        self.ecc_file(index, name).write_text(f"{count}\n")

    def components_file(self, index: int) -> Path:
        return self.device_dir(index) / "stats" / "hardware" / "health_status" / "unhealthy_components"

    def set_unhealthy(self, index: int, text: str) -> None:
        """`unhealthy_components` now prints `text` and a newline: "" (healthy),
        "hbm,link_efa", "device_unreachable" (`neuron_sysfs_metrics.c`,
        2.30.2.0). The node is read-only (0444), as the driver makes it: the
        fake writes it as its owner would after making it writable."""
        path = self.components_file(index)
        if not path.exists():
            raise ValueError(f"neuron{index} has no unhealthy_components (a {self.generation.name} device)")
        path.chmod(0o644)
        path.write_text(f"{text}\n")
        path.chmod(MODE_RO_ALL)

    def _stash(self, path: Path) -> Path:
        return self.sys_root.parent / "gone" / os.path.relpath(path, self.sys_root.parent).replace(os.sep, "!")

    def take_away(self, index: int, sysfs: bool = True, dev: bool = True) -> None:
        """The device goes away: its `neuronN` directory and/or its /dev node
        disappear (the driver removes both when the device is removed), kept aside to come back."""
        for keep, path in ((sysfs, self.device_dir(index)), (dev, self.dev_node(index))):
            if keep and os.path.lexists(path):
                stash = self._stash(path)
                stash.parent.mkdir(parents=True, exist_ok=True)
                os.rename(path, stash)

    def bring_back(self, index: int) -> None:
        for path in (self.device_dir(index), self.dev_node(index)):
            stash = self._stash(path)
            if os.path.lexists(stash):
                os.rename(stash, path)


def _write(path: Path, text: str, mode: int = MODE_METRIC) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _counter(path: Path, total: int = 0, present: int = 0, peak: int | None = None) -> None:
    _write(path / "total", f"{total}\n")
    _write(path / "present", f"{present}\n")
    if peak is not None:
        _write(path / "peak", f"{peak}\n")


def _mem_counter(path: Path, used: int) -> None:
    # As if `used` bytes came from one allocation: total = used, present = last size, peak = max.
    _counter(path, used, used, used)


def _symlink(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


def _core_tree(
    core: Path,
    gen: Generation,
    used: int,
    time_in_use_us: int,
) -> None:
    stats = core / "stats"
    for name in STATUS_COUNTERS:
        _counter(stats / "status" / name)
    mem = stats / "memory_usage"
    _mem_counter(mem / "host_mem", 0)
    _mem_counter(mem / "device_mem", used)
    for name in DEVICE_MEM_CATEGORIES:
        _mem_counter(mem / "device_mem" / name, used if name == "tensors" else 0)
    for name in OTHER_INFO_COUNTERS:
        value = time_in_use_us if name == "nc_time_in_use" else 0
        _counter(stats / "other_info" / name, value, value)
    # ntpb_pe_format_activity_stats_vc: a header, then one row per row group (count not modelled).
    rows = "".join(f"{i},0,0,0\n" for i in range(4))
    _write(stats / "tensor_engine" / "pe_cntrs", "xrow_grp,mm_active,wl_active,idle\n" + rows)
    _write(core / "info" / "architecture" / "arch_type", f"{gen.nc_arch_type}\n")


def build_tree(
    root: Path,
    instance: str,
    *,
    sysfs_devices: Iterable[int] | None = None,
    dev_nodes: Iterable[int] | None = None,
    core_metrics: bool = True,
    device_mem_used: Mapping[tuple[int, int], int] | None = None,
    nc_time_in_use_us: Mapping[tuple[int, int], int] | None = None,
    ecc: Mapping[int, Mapping[str, int]] | None = None,
    pci: bool = True,
    dmi_product_name: str | None = None,
    char_devices: bool = True,
    generation: Generation | None = None,
    layout: str = "2.30",
    unhealthy: Mapping[int, str] | None = None,
) -> NeuronSysfs:
    """Lay out ``root/sys`` and ``root/dev`` as the driver does for ``instance``.

    ``sysfs_devices``: devices with a ``neuronN`` directory (default: all host
    devices; sysfs is not namespaced, so a container sees them all).
    ``dev_nodes``: devices with a ``/dev/neuronN`` (default: all; a container
    sees only the ones mounted into it). ``core_metrics=False`` skips the
    per-core ``stats`` trees (thousands of files on trn2) for speed.
    ``ecc``: device -> {ECC file name: count}. ``char_devices``: make character
    devices (major 0, which no driver owns, so opening them fails with ENXIO)
    where mknod is permitted; otherwise plain files (see ``dev_node_kind``).
    ``generation``: devices of another generation than the instance's (a
    made-up one, to test what the backend does with a device it does not
    know). ``layout``: "2.30" (the driver's, 2.24.7.0 to 2.30.2.0) or
    "unrecognised" (see the module doc). ``unhealthy``: device ->
    ``unhealthy_components`` text without its newline (health nodes are
    written for Trainium3 only, as the driver does).
    """
    if instance not in INSTANCES:
        raise ValueError(f"unknown instance {instance!r}; known: {', '.join(sorted(INSTANCES))}")
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    gen, total = INSTANCES[instance]
    gen = generation or gen
    in_sysfs = tuple(sorted(set(range(total) if sysfs_devices is None else sysfs_devices)))
    with_nodes = tuple(sorted(set(range(total) if dev_nodes is None else dev_nodes)))
    for i in (*in_sysfs, *with_nodes):
        if not 0 <= i < total:
            raise ValueError(f"device {i} is not on a {instance} ({total} devices)")
    if (FIXTURES / f"{instance}.json").exists():
        pci_info = fixture_pci(instance)
    elif gen not in (TRN1, INF2, TRN2):
        pci_info = placeholder_pci(total)
    else:
        pci_info = {}
    sys_root, dev_root = root / "sys", root / "dev"
    tree = NeuronSysfs(sys_root, dev_root, instance, gen, total, in_sysfs, with_nodes, pci_info, "file")
    root_only: list[Path] = []

    # neuron_device class: one link per device node, plus the class attributes.
    for name in CLASS_ATTRS:
        _write(tree.class_root / name, "", MODE_RO_ALL)  # no pod: the show functions return 0 bytes

    for i in in_sysfs:
        d = tree.device_dir(i)
        d.mkdir(parents=True)
        _symlink(tree.class_root / f"neuron{i}", d)
        _symlink(d / "subsystem", tree.class_root)
        _write(d / "dev", f"0:{i}\n", MODE_RO_ALL)
        _write(d / "uevent", f"MAJOR=0\nMINOR={i}\nDEVNAME=neuron{i}\n")
        if layout == "unrecognised":
            continue
        _write(d / "reset", "0\n", 0o600)
        _write(d / "core_count", f"{gen.nc_per_device}", 0o400)  # "%d", no newline
        _write(d / "connected_devices", connected_devices_text(driver_links(gen, total, i)), 0o400)
        root_only += [d / name for name in ROOT_ONLY_FILES]

        info = d / "info"
        _write(info / "notify_delay", "-1\n")
        _write(info / "serial_number", f"{0x9FF5434815C8BD00 + i:016x}\n")  # synthetic, driver format
        arch = info / "architecture"
        _write(arch / "arch_type", f"{gen.nd_arch_type}\n")
        _write(arch / "instance_type", f"{gen.instance_family}\n")
        _write(arch / "device_name", f"{gen.device_name}\n")

        stats = d / "stats"
        for name in HOST_MEM_CATEGORIES:
            _mem_counter(stats / "memory_usage" / "host_mem" / name, 0)
        for name in ECC_FILES:
            _write(stats / "hardware" / name, f"{(ecc or {}).get(i, {}).get(name, 0)}\n")
        _write(stats / "power" / "utilization", "POWER_STATUS_VALID,1789180860,0.00,0.00,0.00\n")
        if gen in HEALTH_GENERATIONS:
            health = stats / "hardware" / "health_status"
            _write(health / "unhealthy_components", f"{(unhealthy or {}).get(i, '')}\n", MODE_RO_ALL)
            _write(health / "healthcheck_heartbeat", "0\n", MODE_RO_ALL)
            _write(health / "hw_error_event", "0\n", MODE_RO_ALL)

        for c in range(gen.nc_per_device):
            core = tree.core_dir(i, c)
            if core_metrics:
                _core_tree(
                    core,
                    gen,
                    (device_mem_used or {}).get((i, c), 0),
                    (nc_time_in_use_us or {}).get((i, c), 0),
                )
            else:
                _write(core / "info" / "architecture" / "arch_type", f"{gen.nc_arch_type}\n")

    if pci:
        drivers = sys_root / "bus" / "pci" / "drivers" / "neuron"
        drivers.mkdir(parents=True, exist_ok=True)
        for i in range(total):  # every Neuron PCI function is on the bus, whatever a container mounts
            p = pci_info.get(i)
            if p is None:
                continue
            real = sys_root / "devices" / "pci0000:00" / p.bdf
            real.mkdir(parents=True)
            _write(real / "vendor", "0x1d0f\n", MODE_RO_ALL)
            _write(real / "device", f"0x{gen.pci_device_id:04x}\n", MODE_RO_ALL)
            _write(real / "numa_node", f"{p.numa_node}\n", 0o644)
            _write(real / "local_cpulist", f"{p.local_cpulist}\n", MODE_RO_ALL)
            _symlink(real / "driver", drivers)
            _symlink(tree.pci_devices / p.bdf, real)
            _symlink(drivers / p.bdf, real)

    if dmi_product_name is not None:
        _write(tree.dmi_product_name, f"{dmi_product_name}\n", MODE_RO_ALL)
        _symlink(sys_root / "class" / "dmi" / "id", tree.dmi_product_name.parent)

    dev_root.mkdir(parents=True, exist_ok=True)
    kind = "char" if char_devices else "file"
    for i in with_nodes:
        node = tree.dev_node(i)
        if kind == "char":
            try:
                os.mknod(node, stat.S_IFCHR | MODE_DEV_NODE, os.makedev(0, i))
            except OSError:  # no CAP_MKNOD, or a filesystem without device nodes
                kind = "file"
        if kind == "file":
            node.touch()
        node.chmod(MODE_DEV_NODE)

    for d in (sys_root, dev_root):
        for dirpath, _dirs, _files in os.walk(d):
            os.chmod(dirpath, MODE_DIR)
    return NeuronSysfs(sys_root, dev_root, instance, gen, total, in_sysfs, with_nodes, pci_info, kind, tuple(root_only))


# ---------------------------------------------------------------------------
# Reading the tree as a non-root user would
# ---------------------------------------------------------------------------


def hide_root_only(tree: NeuronSysfs) -> bool:
    """chmod 000 the files the driver makes root-only.

    Returns True when that alone makes them unreadable to this process (it is
    not root). Root ignores modes: then use ``denied_reads`` in-process,
    ``denied_reads_env`` for a Python subprocess such as the CLI, or run a
    non-Python reader through ``unprivileged_argv`` (the tree must then sit
    under directories that 'nobody' can traverse; pytest's tmp_path is 0700).
    """
    for path in tree.root_only:
        path.chmod(0)
    return os.geteuid() != 0


def unprivileged_argv(argv: list[str]) -> list[str]:
    """Prefix a command so that it runs as 'nobody' when we are root (util-linux setpriv)."""
    if os.geteuid() != 0:
        return list(argv)
    return ["setpriv", f"--reuid={UNPRIVILEGED_UID}", f"--regid={UNPRIVILEGED_UID}", "--clear-groups", "--", *argv]


@contextlib.contextmanager
def denied_reads(paths: Iterable[Path]) -> Iterator[None]:
    """In this process, opening any of ``paths`` fails with EACCES, as it does
    for a non-root reader of the driver's 0400 files."""
    denied = {os.path.realpath(p) for p in paths}
    real_os_open, real_open = os.open, builtins.open

    def check(path: object) -> None:
        if isinstance(path, (str, bytes, os.PathLike)) and os.path.realpath(os.fsdecode(path)) in denied:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))

    def os_open(path: object, *args: object, **kwargs: object) -> int:
        check(path)
        return real_os_open(path, *args, **kwargs)  # type: ignore[arg-type]

    def py_open(file: object, *args: object, **kwargs: object) -> object:
        check(file)
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    os.open, builtins.open, io.open = os_open, py_open, py_open  # type: ignore[assignment]
    try:
        yield
    finally:
        os.open, builtins.open, io.open = real_os_open, real_open, real_open


DENY_ENV = "NEURON_FAKE_DENY_READS"

_SITECUSTOMIZE = """\
# Written by tests/fakes/neuron_sysfs.py::denied_reads_env. Opening a path listed
# in the file named by $NEURON_FAKE_DENY_READS fails with EACCES, as reading the
# Neuron driver's 0400 sysfs files does for a non-root user.
import builtins, errno, io, os

_list = os.environ.get("NEURON_FAKE_DENY_READS")
if _list:
    with open(_list) as _f:
        _denied = {line.rstrip("\\n") for line in _f if line.strip()}
    _os_open, _open = os.open, builtins.open

    def _check(path):
        if isinstance(path, (str, bytes, os.PathLike)) and os.path.realpath(os.fsdecode(path)) in _denied:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))

    def _patched_os_open(path, *a, **k):
        _check(path)
        return _os_open(path, *a, **k)

    def _patched_open(file, *a, **k):
        _check(file)
        return _open(file, *a, **k)

    os.open, builtins.open, io.open = _patched_os_open, _patched_open, _patched_open
"""


def denied_reads_env(paths: Iterable[Path], workdir: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a Python subprocess (the CLI) in which opening ``paths``
    fails with EACCES: a ``sitecustomize`` put first on PYTHONPATH. For tests
    that run as root, where modes cannot deny reads and ``setpriv`` cannot run
    the venv's interpreter (it lives under a 0700 home here)."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    listing = workdir / "denied-paths"
    listing.write_text("".join(os.path.realpath(p) + "\n" for p in paths))
    env = os.environ if environ is None else environ
    pythonpath = os.pathsep.join(p for p in (str(workdir), env.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": pythonpath, DENY_ENV: str(listing)}


# ---------------------------------------------------------------------------
# The legacy builder (unchanged): what the existing tests were written against
# ---------------------------------------------------------------------------

DEVICE_NAMES = {"Trainium": "Trainium", "Trainium2": "Trainium2", "Inferentia2": "Inferentia2"}
ARCH_TYPES = {"Trainium": "NCv2", "Trainium2": "NCv3", "Inferentia2": "NCv2"}


def _legacy_counter(path: Path, total: int, present: int | None = None) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "total").write_text(f"{total}\n")
    (path / "present").write_text(f"{total if present is None else present}\n")


def make_tree(root: Path, preset: str, ecc_uncorrected: dict[int, int] | None = None) -> Path:
    """Legacy layout from the mock presets; see the module docstring for how it
    differs from the driver. Returns the directory RAYACCEL_NEURON_SYSFS_ROOT names."""
    spec = load_spec(preset)
    for d in spec.devices:
        base = root / f"neuron{d.index}"
        physical = int(d.attributes["physical_cores"])
        arch = base / "info" / "architecture"
        arch.mkdir(parents=True)
        (base / "core_count").write_text(f"{physical}\n")
        (base / "connected_devices").write_text(", ".join(p.removeprefix("neuron:") for p in d.peers) + "\n")
        (base / "info" / "serial_number").write_text(f"SN{d.index:06d}\n")
        (arch / "device_name").write_text(DEVICE_NAMES[spec.model] + "\n")
        (arch / "arch_type").write_text(ARCH_TYPES[spec.model] + "\n")
        (arch / "instance_type").write_text(f"{preset}\n")
        for c in range(physical):
            _legacy_counter(
                base / f"neuron_core{c}" / "stats" / "memory_usage" / "device_mem", 10**9, (d.index + 1) * 1000 + c
            )
        hw = base / "stats" / "hardware"
        _legacy_counter(hw / "mem_ecc_uncorrected", (ecc_uncorrected or {}).get(d.index, 0))
        _legacy_counter(hw / "mem_ecc_corrected", 7)
        _legacy_counter(hw / "sram_ecc_uncorrected", 0)
    return root
