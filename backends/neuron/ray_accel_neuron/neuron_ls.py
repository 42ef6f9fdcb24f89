"""`neuron-ls` JSON: parsing and running it, with either output flag.

Format of `--json-output` (`-j`; Neuron docs `tools/neuron-sys-tools/
neuron-ls.rst`, 2.22 through 2.33, and public captures;
tests/fixtures/neuron/CATALOGUE.md): a top-level array, one object per
device, with `neuron_device` (the driver's index), `bdf` (short `cc:00.0`
or full `0000:00:1e.0`), `connected_to` (a list, or `null` on a one-device
host), `nc_count` (logical cores: already divided by the LNC),
`logical_neuroncore_config` (Trainium2 only), `memory_size` (bytes),
`neuron_processes` (`pid`, `command`, `neuron_runtime_version`); since tools
2.25 also `cpu_affinity`, `numa_node` (a string, "-1" without NUMA) and
`neuroncore_ids`; some versions put `instance_type` first. Every key but
`neuron_device` and `nc_count` is optional. Values past the driver's maxima
are refused by name (`limits`), never expanded into lists.

`--json-output` ends in Neuron 2.34, replaced by `--output-format json`,
which "adds top-level fields for information that applies to more than one
device, such as instance and UltraServer details" (announcement
announce-intent-eos-neuron-ls-json, 16 October 2026). That is all that is
published of it: its parser here is ASSUMED and reads it by feature, not
by key names. The top level is an object; the devices are the one value
that is a list of objects carrying `neuron_device` (each read as above);
a top-level `instance_type` and `logical_neuroncore_config` apply to every
device that does not print its own (a device that prints another value is
a contradiction); other top-level fields are kept by name only, not read.

Which flag: `run_listing` tries `--output-format json`, then
`--json-output`, and remembers per tool (its real path, inode, size and
mtime) which one answered, so a long-lived caller (the metrics exporter)
runs the tool once per call; a one-shot CLI call on a tool of Neuron 2.33
or older pays one extra, failing, run.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ray_accel.core.reader import Cursor, ReadError, Style, parse_json, show
from ray_accel_neuron import limits
from ray_accel_neuron.tools import ToolError, run_tool

PATH_ENV = "RAYACCEL_NEURON_LS"
TIMEOUT_ENV = "RAYACCEL_NEURON_LS_TIMEOUT"
DEFAULT_TIMEOUT_S = 10.0
MAX_TIMEOUT_S = 600.0

_BDF = re.compile(r"^(?:([0-9a-f]{4}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")

FLAG_OLD = ("--json-output",)  # Neuron 2.22 to 2.33
FLAG_NEW = ("--output-format", "json")  # Neuron 2.34 onwards
FORMAT_OLD = "--json-output"
FORMAT_NEW = "--output-format json (assumed: not yet published)"


class NeuronLsError(ToolError):
    """neuron-ls failed or printed something unusable; the message is the reason."""


@dataclass(frozen=True)
class LsProcess:
    pid: int
    command: str


@dataclass(frozen=True, kw_only=True)
class LsDevice:
    index: int
    nc_count: int  # logical cores
    lnc: int | None  # logical_neuroncore_config, when printed
    core_ids: tuple[int, ...] | None
    connected: tuple[int, ...] | None  # None: the key is absent or null
    bdf: str | None  # normalised 0000:bb:dd.f
    numa_node: int | None
    cpu_affinity: str | None
    memory_bytes: int | None
    instance_type: str | None
    processes: tuple[LsProcess, ...] = ()


def normalize_bdf(bdf: object) -> str | None:
    """`cc:00.0` or `0000:CC:00.0` -> `0000:cc:00.0`; None for anything else."""
    if not isinstance(bdf, str):
        return None
    m = _BDF.match(bdf.strip().lower())
    if m is None:
        return None
    domain, bus, dev, fn = m.groups()
    return f"{domain or '0000'}:{bus}:{dev}.{fn}"


# neuron-ls refusals are written as they always were: `neuron-ls device 3
# nc_count is 100000000.0, not an integer`.
NEURON_LS = Style(
    child=lambda path, key: f"{path}[{key}]" if isinstance(key, int) else f"{path} {key}",
    sep=" ",
    words={
        "mapping": "is not an object",
        "int": "is {value}, not an integer",
        "list": "is {value}, not a list",
        "size": "has {count} entries, more than {limit}",
    },
)
BAD_JSON = "{source} printed invalid JSON ({error})"


def _lnc(node: Cursor) -> int | None:
    """`logical_neuroncore_config`, where printed: 1 or 2."""
    lnc = None if node.data is None else node.int()
    if lnc is not None and lnc not in limits.LNC_VALUES:
        node.fail(f"is {lnc}, not 1 or 2")
    return lnc


def _device(entry: Cursor) -> LsDevice:
    """One device object; `ReadError` or `limits.OutOfRange` name the bad field."""
    fields = entry.mapping()
    first = entry.at("neuron_device", None)
    index = limits.device_index(first.int(), first.path)
    device = Cursor(entry.data, f"neuron-ls device {index}", NEURON_LS)
    nc = device.at("nc_count", None)
    ids = device.at("neuroncore_ids", None).optional()
    links = device.at("connected_to", None).optional()
    numa = device.at("numa_node", None)
    if isinstance(numa.data, str) and re.fullmatch(r"-?[0-9]{1,9}", numa.data.strip()):
        numa = Cursor(int(numa.data), numa.path, NEURON_LS)  # printed as a string ("-1")
    memory = device.at("memory_size", None)
    bdf = device.at("bdf", None)
    if bdf.data is not None and normalize_bdf(bdf.data) is None:
        bdf.fail(f"{show(bdf.data)} is not a PCI address")
    processes = device.at("neuron_processes", None).optional()
    texts = {k: v.strip() for k in ("cpu_affinity", "instance_type") if isinstance(v := fields.get(k), str)}
    return LsDevice(
        index=index,
        nc_count=limits.logical_cores(nc.int(), nc.path),
        lnc=_lnc(device.at("logical_neuroncore_config", None)),
        core_ids=None
        if ids is None
        else tuple(limits.core_id(i.int(), i.path) for i in ids.list(limits.MAX_LOGICAL_CORES)) or None,
        connected=None
        if links is None
        else tuple(limits.device_index(i.int(), i.path) for i in links.list(limits.MAX_DEVICES)),
        bdf=normalize_bdf(bdf.data),
        numa_node=None if numa.data is None else numa.int(-1),
        cpu_affinity=texts.get("cpu_affinity") or None,
        memory_bytes=None if memory.data is None else memory.int(0) or None,
        instance_type=texts.get("instance_type") or None,
        processes=() if processes is None else tuple(_process(p) for p in processes.list()),
    )


def _process(node: Cursor) -> LsProcess:
    pid = node.at("pid", None)
    if (value := pid.int()) <= 0:
        pid.fail(f"is {value}, not a process id")
    command = node.at("command", "").data
    return LsProcess(value, command if isinstance(command, str) else str(command))


@dataclass(frozen=True)
class LsListing:
    """One run's devices and what the run says of the whole host."""

    devices: tuple[LsDevice, ...]
    format: str = FORMAT_OLD  # which output format it was
    instance_type: str | None = None  # top-level (new format)
    unread: tuple[str, ...] = ()  # top-level fields kept by name only (new format)


def _devices(data: list[Any], where: str) -> tuple[LsDevice, ...]:
    if len(data) > limits.MAX_DEVICES:
        raise NeuronLsError(f"{where} lists {len(data)} devices, more than {limits.MAX_DEVICES}")
    devices = [_device(Cursor(entry, f"neuron-ls device #{pos}", NEURON_LS)) for pos, entry in enumerate(data)]
    seen: set[int] = set()
    for d in devices:
        if d.index in seen:
            raise NeuronLsError(f"neuron-ls lists device {d.index} twice")
        seen.add(d.index)
    return tuple(sorted(devices, key=lambda d: d.index))


def parse_output(text: str) -> tuple[LsDevice, ...]:
    """The devices of one `--json-output`, sorted by index; NeuronLsError names what is wrong."""
    try:
        data = parse_json(text, "neuron-ls", BAD_JSON, nan=True)
        if not isinstance(data, list):
            raise NeuronLsError(f"neuron-ls JSON is a {type(data).__name__}, not a list of devices")
        return _devices(data, "neuron-ls")
    except (ReadError, limits.OutOfRange) as e:
        raise NeuronLsError(str(e)) from None


def _is_device_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(e, dict) and "neuron_device" in e for e in value)


# Top-level keys of the new format that this parser reads or knowingly skips.
_TOP_READ = ("instance_type", "logical_neuroncore_config")
_TOP_KNOWN = ("instance_id",)


def parse_new_output(text: str) -> LsListing:
    """One `--output-format json` (ASSUMED format, see the module's doc)."""
    try:
        return _new_output(parse_json(text, "neuron-ls", BAD_JSON, nan=True))
    except (ReadError, limits.OutOfRange) as e:
        raise NeuronLsError(str(e)) from None


def _new_output(data: object) -> LsListing:
    if not isinstance(data, dict):
        raise NeuronLsError(
            f"neuron-ls --output-format json is a {type(data).__name__}, not an object with a list of devices"
        )
    lists = [k for k, v in data.items() if _is_device_list(v)]
    full = [k for k in lists if data[k]]
    if len(full) > 1:
        raise NeuronLsError(f"neuron-ls --output-format json has several device lists: {', '.join(map(str, full))}")
    if not lists:
        shown = ", ".join(repr(k) for k in list(data)[:10]) or "none"
        raise NeuronLsError(
            f"neuron-ls --output-format json holds no list of devices (objects with neuron_device); keys: {shown}"
        )
    # An empty list fits any name: the devices are the full one, else the only list.
    key = full[0] if full else lists[0]
    devices = _devices(data[key], "neuron-ls --output-format json")
    instance = data.get("instance_type")
    instance = (instance.strip() or None) if isinstance(instance, str) else None
    lnc = _lnc(Cursor(data, "neuron-ls top-level", NEURON_LS).at("logical_neuroncore_config", None))
    out = []
    for d in devices:
        if lnc is not None and d.lnc is not None and d.lnc != lnc:
            raise NeuronLsError(
                f"neuron-ls device {d.index} logical_neuroncore_config {d.lnc} differs from the top-level {lnc}"
            )
        if instance and d.instance_type and d.instance_type != instance:
            raise NeuronLsError(
                f"neuron-ls device {d.index} instance_type {d.instance_type!r} differs from the top-level {instance!r}"
            )
        out.append(replace(d, lnc=d.lnc if d.lnc is not None else lnc, instance_type=d.instance_type or instance))
    unread = tuple(sorted(str(k) for k in data if k not in (key, *_TOP_READ, *_TOP_KNOWN)))
    return LsListing(tuple(out), FORMAT_NEW, instance, unread)


def parse_listing(text: str) -> LsListing:
    """Either format, told apart by its shape: an array is `--json-output`,
    an object `--output-format json`."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return parse_new_output(text)
    return LsListing(parse_output(text))


# Per tool (real path, inode, size, mtime): the flag it answered to. A tool
# replaced by an upgrade is a new key.
_FLAG_CACHE: dict[tuple[str, int, int, int], tuple[str, ...]] = {}
_FLAG_LOCK = threading.Lock()


def _tool_key(path: str) -> tuple[str, int, int, int] | None:
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except (OSError, ValueError):
        return None
    return real, st.st_ino, st.st_size, st.st_mtime_ns


def remembered_flag(path: str) -> tuple[str, ...] | None:
    key = _tool_key(path)
    with _FLAG_LOCK:
        return None if key is None else _FLAG_CACHE.get(key)


def _remember(path: str, flag: tuple[str, ...]) -> None:
    key = _tool_key(path)
    if key is not None:
        with _FLAG_LOCK:
            _FLAG_CACHE[key] = flag


def run_listing(path: str, timeout_s: float, env: Mapping[str, str] | None = None) -> LsListing:
    """Run neuron-ls with the flag it accepts and parse what it prints.

    The remembered flag first; else `--output-format json`, then
    `--json-output`. The whole round is tried twice: tools before Neuron
    2.28 could fail when several processes queried the driver at once
    (release notes, dev-tools). A timeout ends the attempt at once. What
    the tool printed is parsed by its shape (`parse_listing`), so a tool
    that answers one flag with the other's format is still read."""
    known = remembered_flag(path)
    flags = (known,) if known is not None else (FLAG_NEW, FLAG_OLD)
    failures: list[str] = []
    for _attempt in range(2):
        for flag in flags:
            try:
                run = run_tool([path, *flag], timeout_s, env)
            except ToolError as e:
                raise NeuronLsError(str(e)) from None
            if run.returncode == 0:
                listing = parse_listing(run.stdout)
                _remember(path, flag)
                return listing
            failures.append(f"{' '.join(flag)}: exited with {run.returncode}: {run.last_error_line()}")
    shown = "; ".join(dict.fromkeys(failures))
    raise NeuronLsError(f"{path} {shown}")


def run_neuron_ls(path: str, timeout_s: float, env: Mapping[str, str] | None = None) -> tuple[LsDevice, ...]:
    """The devices of one run (`run_listing`)."""
    return run_listing(path, timeout_s, env).devices
