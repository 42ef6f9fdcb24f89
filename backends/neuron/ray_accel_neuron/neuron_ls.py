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

import json
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

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


@dataclass(frozen=True)
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


def _int(value: object, where: str) -> int:
    # JSON gives int; bool is an int subclass and a float like 1e8 is not an id.
    if isinstance(value, bool) or not isinstance(value, int):
        raise NeuronLsError(f"{where} is {value!r}, not an integer")
    return value


def _int_text(value: object, where: str) -> int:
    """numa_node is printed as a string ("-1"); accept an int too."""
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,9}", value.strip()):
        return int(value.strip())
    return _int(value, where)


def _bounded(check: Any, value: int, where: str) -> int:
    try:
        result: int = check(value, where)
    except limits.OutOfRange as e:
        raise NeuronLsError(str(e)) from None
    return result


def _int_list(value: object, where: str, check: Any, max_len: int) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise NeuronLsError(f"{where} is {value!r}, not a list")
    if len(value) > max_len:
        raise NeuronLsError(f"{where} has {len(value)} entries, more than {max_len}")
    return tuple(_bounded(check, _int(v, f"{where}[{i}]"), f"{where}[{i}]") for i, v in enumerate(value))


def _processes(value: object, where: str) -> tuple[LsProcess, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise NeuronLsError(f"{where} is {value!r}, not a list")
    out = []
    for i, p in enumerate(value):
        if not isinstance(p, dict):
            raise NeuronLsError(f"{where}[{i}] is not an object")
        pid = _int(p.get("pid"), f"{where}[{i}].pid")
        if pid <= 0:
            raise NeuronLsError(f"{where}[{i}].pid is {pid}, not a process id")
        command = p.get("command", "")
        out.append(LsProcess(pid, command if isinstance(command, str) else str(command)))
    return tuple(out)


def _optional_str(entry: Mapping[str, Any], key: str) -> str | None:
    value = entry.get(key)
    return value.strip() if isinstance(value, str) and value.strip() else None


def parse_device(entry: object, pos: int) -> LsDevice:
    if not isinstance(entry, dict):
        raise NeuronLsError(f"neuron-ls device #{pos} is not an object")
    first = f"neuron-ls device #{pos} neuron_device"
    index = _bounded(limits.device_index, _int(entry.get("neuron_device"), first), first)
    where = f"neuron-ls device {index}"
    nc = _bounded(limits.logical_cores, _int(entry.get("nc_count"), f"{where} nc_count"), f"{where} nc_count")
    lnc_raw = entry.get("logical_neuroncore_config")
    lnc = None
    if lnc_raw is not None:
        lnc = _int(lnc_raw, f"{where} logical_neuroncore_config")
        if lnc not in limits.LNC_VALUES:
            raise NeuronLsError(f"{where} logical_neuroncore_config is {lnc}, not 1 or 2")
    ids_raw = entry.get("neuroncore_ids")
    ids = None
    if ids_raw is not None:
        ids = _int_list(ids_raw, f"{where} neuroncore_ids", limits.core_id, limits.MAX_LOGICAL_CORES) or None
    links_raw = entry.get("connected_to")
    links = None
    if links_raw is not None:
        links = _int_list(links_raw, f"{where} connected_to", limits.device_index, limits.MAX_DEVICES)
    numa_raw = entry.get("numa_node")
    numa = None if numa_raw is None else _int_text(numa_raw, f"{where} numa_node")
    if numa is not None and numa < -1:
        raise NeuronLsError(f"{where} numa_node is {numa}")
    mem_raw = entry.get("memory_size")
    memory = None if mem_raw is None else _int(mem_raw, f"{where} memory_size")
    if memory is not None and memory < 0:
        raise NeuronLsError(f"{where} memory_size is {memory}")
    bdf_raw = entry.get("bdf")
    bdf = normalize_bdf(bdf_raw)
    if bdf_raw is not None and bdf is None:
        raise NeuronLsError(f"{where} bdf {bdf_raw!r} is not a PCI address")
    return LsDevice(
        index=index,
        nc_count=nc,
        lnc=lnc,
        core_ids=ids,
        connected=links,
        bdf=bdf,
        numa_node=numa,
        cpu_affinity=_optional_str(entry, "cpu_affinity"),
        memory_bytes=memory or None,
        instance_type=_optional_str(entry, "instance_type"),
        processes=_processes(entry.get("neuron_processes"), f"{where} neuron_processes"),
    )


@dataclass(frozen=True)
class LsListing:
    """One run's devices and what the run says of the whole host."""

    devices: tuple[LsDevice, ...]
    format: str = FORMAT_OLD  # which output format it was
    instance_type: str | None = None  # top-level (new format)
    unread: tuple[str, ...] = ()  # top-level fields kept by name only (new format)


def _load(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise NeuronLsError(f"neuron-ls printed invalid JSON ({e.msg} at line {e.lineno})") from None
    except RecursionError:
        raise NeuronLsError("neuron-ls printed JSON nested too deeply") from None


def _devices(data: list[Any], where: str) -> tuple[LsDevice, ...]:
    if len(data) > limits.MAX_DEVICES:
        raise NeuronLsError(f"{where} lists {len(data)} devices, more than {limits.MAX_DEVICES}")
    devices = [parse_device(entry, pos) for pos, entry in enumerate(data)]
    seen: set[int] = set()
    for d in devices:
        if d.index in seen:
            raise NeuronLsError(f"neuron-ls lists device {d.index} twice")
        seen.add(d.index)
    return tuple(sorted(devices, key=lambda d: d.index))


def parse_output(text: str) -> tuple[LsDevice, ...]:
    """The devices of one `--json-output`, sorted by index; NeuronLsError names what is wrong."""
    data = _load(text)
    if not isinstance(data, list):
        raise NeuronLsError(f"neuron-ls JSON is a {type(data).__name__}, not a list of devices")
    return _devices(data, "neuron-ls")


def _is_device_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(e, dict) and "neuron_device" in e for e in value)


# Top-level keys of the new format that this parser reads or knowingly skips.
_TOP_READ = ("instance_type", "logical_neuroncore_config")
_TOP_KNOWN = ("instance_id",)


def parse_new_output(text: str) -> LsListing:
    """One `--output-format json` (ASSUMED format, see the module's doc)."""
    data = _load(text)
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
    instance = _optional_str(data, "instance_type")
    lnc_raw = data.get("logical_neuroncore_config")
    lnc = None
    if lnc_raw is not None:
        lnc = _int(lnc_raw, "neuron-ls top-level logical_neuroncore_config")
        if lnc not in limits.LNC_VALUES:
            raise NeuronLsError(f"neuron-ls top-level logical_neuroncore_config is {lnc}, not 1 or 2")
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
