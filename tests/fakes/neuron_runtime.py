"""A fake of what the Neuron runtime and PJRT check when a job's processes start.

The constraints modelled, with where each comes from:
- A NeuronCore is opened by one process only: a second process asking for a
  core already in use fails (Neuron runtime docs, "NeuronCore allocation":
  NEURON_RT_VISIBLE_CORES gives a process exclusive cores; "a NeuronCore can
  only be used by a single process at a time").
- NEURON_RT_VISIBLE_CORES takes a comma list of ids and ranges ("0-3,8";
  runtime configuration docs; torch-xla 2.9 `neuron_utils.get_visible_cores_list`
  expands ranges).
- PJRT's multi-process Neuron client reads NEURON_PJRT_PROCESS_INDEX (this
  process's index), NEURON_PJRT_PROCESSES_NUM_DEVICES (every process's device
  count, in index order) and NEURON_RT_ROOT_COMM_ID (one host:port for the
  whole job) (torch-xla 2.9 `_internal/neuron.py`, `initialize_env`): each
  process's entry must equal the cores it really opens, indexes must be
  0..N-1 once each, and the root must be the same everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class NeuronRuntimeError(Exception):
    pass


def visible_cores(value: str) -> list[int]:
    out: list[int] = []
    for token in value.split(","):
        lo, sep, hi = token.strip().partition("-")
        out += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
    return out


def start_job(envs: Sequence[Mapping[str, str]]) -> dict[int, list[int]]:
    """Open every process's cores as the runtime would; process index -> cores."""
    opened: dict[int, int] = {}
    by_index: dict[int, list[int]] = {}
    roots = {env.get("NEURON_RT_ROOT_COMM_ID") for env in envs}
    if len(roots) != 1 or None in roots:
        raise NeuronRuntimeError(f"processes disagree on NEURON_RT_ROOT_COMM_ID: {sorted(map(str, roots))}")
    for env in envs:
        index = int(env["NEURON_PJRT_PROCESS_INDEX"])
        counts = [int(c) for c in env["NEURON_PJRT_PROCESSES_NUM_DEVICES"].split(",")]
        cores = visible_cores(env["NEURON_RT_VISIBLE_CORES"])
        if len(counts) != len(envs):
            raise NeuronRuntimeError(f"process {index}: {len(counts)} device counts for {len(envs)} processes")
        if index in by_index or not 0 <= index < len(envs):
            raise NeuronRuntimeError(f"process index {index} repeated or out of range")
        if counts[index] != len(cores):
            raise NeuronRuntimeError(f"process {index} says it has {counts[index]} cores but opens {len(cores)}")
        for core in cores:
            if core in opened:
                raise NeuronRuntimeError(f"NeuronCore {core} already in use by process {opened[core]}")
            opened[core] = index
        by_index[index] = cores
    return by_index
