"""`neuron-ls --json-output`: parsing and running it.

Format (Neuron docs `tools/neuron-sys-tools/neuron-ls.rst`, 2.22 through
HEAD, and public captures; tests/fixtures/neuron/CATALOGUE.md): a top-level
array, one object per device, with `neuron_device` (the driver's index),
`bdf` (short `cc:00.0` or full `0000:00:1e.0`), `connected_to` (a list, or
`null` on a one-device node), `nc_count` (logical cores: already divided by
the LNC), `logical_neuroncore_config` (Trainium2 only), `memory_size` (bytes),
`neuron_processes` (`pid`, `command`, `neuron_runtime_version`); since tools
2.25 also `cpu_affinity`, `numa_node` (a string, "-1" without NUMA) and
`neuroncore_ids`; some versions put `instance_type` first. Every key but
`neuron_device` and `nc_count` is optional. Values past the driver's maxima
are refused by name (`limits`), never expanded into lists.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ray_accel_neuron import limits
from ray_accel_neuron.tools import ToolError, run_tool

PATH_ENV = "RAYACCEL_NEURON_LS"
TIMEOUT_ENV = "RAYACCEL_NEURON_LS_TIMEOUT"
DEFAULT_TIMEOUT_S = 10.0
MAX_TIMEOUT_S = 600.0

_BDF = re.compile(r"^(?:([0-9a-f]{4}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")


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


def parse_output(text: str) -> tuple[LsDevice, ...]:
    """The devices of one `--json-output`, sorted by index; NeuronLsError names what is wrong."""
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as e:
        raise NeuronLsError(f"neuron-ls printed invalid JSON ({e.msg} at line {e.lineno})") from None
    except RecursionError:
        raise NeuronLsError("neuron-ls printed JSON nested too deeply") from None
    if not isinstance(data, list):
        raise NeuronLsError(f"neuron-ls JSON is a {type(data).__name__}, not a list of devices")
    if len(data) > limits.MAX_DEVICES:
        raise NeuronLsError(f"neuron-ls lists {len(data)} devices, more than {limits.MAX_DEVICES}")
    devices = [parse_device(entry, pos) for pos, entry in enumerate(data)]
    seen: set[int] = set()
    for d in devices:
        if d.index in seen:
            raise NeuronLsError(f"neuron-ls lists device {d.index} twice")
        seen.add(d.index)
    return tuple(sorted(devices, key=lambda d: d.index))


def run_neuron_ls(path: str, timeout_s: float, env: Mapping[str, str] | None = None) -> tuple[LsDevice, ...]:
    """Run it once more if it fails: tools before Neuron 2.28 could fail when
    several processes queried the driver at once (release notes, dev-tools)."""
    run = None
    for _attempt in range(2):
        try:
            run = run_tool([path, "--json-output"], timeout_s, env)
        except ToolError as e:
            raise NeuronLsError(str(e)) from None
        if run.returncode == 0:
            return parse_output(run.stdout)
    assert run is not None
    raise NeuronLsError(f"{path} exited with {run.returncode}: {run.last_error_line()}")
