"""Fallback discovery through ``neuron-ls --json-output``, with a timeout.

Tolerant of older tools: missing ``numa_node``, ``neuroncore_ids``,
``memory_size`` or ``cpu_affinity``; ``numa_node`` as a string ("-1");
``connected_to: null`` on a one-device node; short or full PCI BDFs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from ray_accel.core.errors import RayAccelError

DEFAULT_PATH = "/opt/aws/neuron/bin/neuron-ls"
PATH_ENV = "RAYACCEL_NEURON_LS"
TIMEOUT_ENV = "RAYACCEL_NEURON_LS_TIMEOUT"
DEFAULT_TIMEOUT_S = 10.0


class NeuronLsError(RayAccelError):
    """neuron-ls failed; the message is the reason shown for the plugin."""


@dataclass(frozen=True)
class LsDevice:
    index: int
    nc_count: int
    core_ids: tuple[int, ...] | None
    connected: tuple[int, ...]
    bdf: str | None
    numa_node: int
    memory_bytes: int | None
    pids: tuple[int, ...]


def find_neuron_ls(environ: dict[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    if env.get(PATH_ENV):
        return env[PATH_ENV]
    if os.path.isfile(DEFAULT_PATH) and os.access(DEFAULT_PATH, os.X_OK):
        return DEFAULT_PATH
    return shutil.which("neuron-ls")


def normalize_bdf(bdf: object) -> str | None:
    if not isinstance(bdf, str) or not bdf.strip():
        return None
    text = bdf.strip().lower()
    return text if text.count(":") == 2 else f"0000:{text}"


def _int(value: object, default: int) -> int:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default


def parse_output(text: str) -> list[LsDevice]:
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as e:
        raise NeuronLsError(f"neuron-ls printed invalid JSON ({e.msg} at line {e.lineno})") from None
    if isinstance(data, dict):  # some versions wrap the list
        data = data.get("neuron_devices", data.get("devices"))
    if not isinstance(data, list):
        raise NeuronLsError("neuron-ls JSON is not a list of devices")
    out = []
    for pos, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise NeuronLsError(f"neuron-ls device #{pos} is not an object")
        nc = _int(entry.get("nc_count"), -1)
        if nc <= 0:
            raise NeuronLsError(f"neuron-ls device #{pos} has no usable nc_count ({entry.get('nc_count')!r})")
        ids = entry.get("neuroncore_ids")
        procs = entry.get("neuron_processes") or []
        out.append(
            LsDevice(
                index=_int(entry.get("neuron_device"), pos),
                nc_count=nc,
                core_ids=tuple(int(i) for i in ids) if isinstance(ids, list) and ids else None,
                connected=tuple(int(c) for c in entry.get("connected_to") or []),
                bdf=normalize_bdf(entry.get("bdf")),
                numa_node=_int(entry.get("numa_node"), -1),
                memory_bytes=_int(entry.get("memory_size"), 0) or None,
                pids=tuple(_int(p.get("pid"), -1) for p in procs if isinstance(p, dict)),
            )
        )
    return out


def run_neuron_ls(path: str, timeout_s: float | None = None) -> list[LsDevice]:
    timeout = timeout_s if timeout_s is not None else float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))
    try:
        proc = subprocess.run([path, "--json-output"], capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise NeuronLsError(f"{path} --json-output did not answer within {timeout:g}s") from None
    except OSError as e:
        raise NeuronLsError(f"cannot run {path}: {e.strerror or e}") from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        last = lines[-1] if lines else "no output"
        raise NeuronLsError(f"{path} exited with {proc.returncode}: {last}")
    return parse_output(proc.stdout)
