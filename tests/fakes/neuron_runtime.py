"""A fake of what torch-xla 2.9, PJRT and the Neuron runtime do with a job's
environments when its processes start on a Neuron host.

Per process, in order, each rule with its source (torch_xla 2.9.0 as installed
in .venv-xla, byte-identical to tag v2.9.0 of pytorch/xla; the XLA lane,
tests/integration/test_xla_neuron_start.py, checks the fake against it):

1. torch-xla's import-time configuration (torch_xla/__init__.py:119-142 runs
   `neuron.set_envvar_defaults` and `neuron.configure_pjrt_environment`,
   torch_xla/_internal/neuron.py:45-89):
   - NEURON_RT_ROOT_COMM_ID unset: MASTER_ADDR (default localhost) with port
     62182 (neuron.py:16-37);
   - only when TORCHELASTIC_RUN_ID is set and XLA_USE_SPMD is not "1"
     (neuron.py:58-60; torch's `is_torchelastic_launched`): with neither
     NEURON_PJRT_PROCESSES_NUM_DEVICES nor NEURON_PJRT_WORLD_SIZE set,
     NEURON_PJRT_WORLD_SIZE=WORLD_SIZE and PJRT_LOCAL_PROCESS_COUNT=
     LOCAL_WORLD_SIZE (64-73); an unset or empty NEURON_RT_VISIBLE_CORES
     becomes LOCAL_RANK, a set one goes through `remap_visible_cores` (76-81);
     NEURON_PJRT_PROCESS_INDEX=RANK and PJRT_LOCAL_PROCESS_RANK=LOCAL_RANK
     (83-89).
2. torch-xla's reading of NEURON_RT_VISIBLE_CORES (neuron_utils.py:8-43):
   comma items, each `<int>` or `<lo>-<hi>` with lo <= hi, kept in the given
   order; an empty or malformed item, or items that overlap or repeat, raise
   ValueError. `remap_visible_cores(local_rank, local_world_size)` (46-67):
   one core (or none) with local world size 1 is kept; otherwise the count
   must equal the local world size and the process is narrowed to the
   local_rank-th core; anything else raises ValueError.
3. PJRT's process layout (libneuronpjrt is closed; the meaning is how
   torch-xla sets the variables): NEURON_PJRT_PROCESS_INDEX is this process's
   index, 0..N-1 once each; NEURON_PJRT_PROCESSES_NUM_DEVICES lists every
   process's core count in index order, and this process's entry must be the
   number of cores it really opens; NEURON_PJRT_WORLD_SIZE instead means N
   processes of one core each (the comment at neuron.py:62-63). torch-xla
   sets one or the other, never both (neuron.py:64); with both set the
   precedence inside libneuronpjrt is unknown, so the fake refuses it. Every
   process must name the same NEURON_RT_ROOT_COMM_ID.
4. The Neuron runtime: "Once a NeuronCore is reserved for a process, it
   cannot be used by another process at all, until the process reserving that
   NeuronCore is terminated" (Neuron Runtime configuration guide, NeuronCore
   allocation, https://awsdocs-neuron.readthedocs-hosted.com/en/latest/
   neuron-runtime/guides/configuration-guide.html).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

VISIBLE = "NEURON_RT_VISIBLE_CORES"
ROOT_PORT = 62182  # torch_xla/_internal/neuron.py:22


class NeuronRuntimeError(Exception):
    pass


def visible_cores(value: str) -> list[int]:
    """torch-xla's `get_visible_cores_list`, as a pure function."""
    out: list[int] = []
    for item in value.split(","):
        bounds = item.split("-")
        try:
            numbers = [int(b) for b in bounds]
        except ValueError:
            raise NeuronRuntimeError(f"malformed range {item!r} in NEURON_RT_VISIBLE_CORES {value!r}") from None
        if len(numbers) > 2 or (len(numbers) == 2 and numbers[0] > numbers[1]):
            raise NeuronRuntimeError(f"bad range {item!r} in NEURON_RT_VISIBLE_CORES {value!r}")
        new = list(range(numbers[0], numbers[-1] + 1))
        if set(out) & set(new):
            raise NeuronRuntimeError(f"overlapping ranges in NEURON_RT_VISIBLE_CORES {value!r}")
        out += new
    return out


def remap_visible_cores(cores: list[int], local_rank: int, local_world_size: int) -> list[int]:
    """torch-xla's `remap_visible_cores`, as a pure function."""
    if local_world_size <= 0:
        raise NeuronRuntimeError("local world size should be non-zero")
    if len(cores) <= 1 and local_world_size == 1:
        return cores
    if local_world_size != len(cores):
        raise NeuronRuntimeError(
            f"LOCAL_WORLD_SIZE {local_world_size} is not equal to count {len(cores)} from NEURON_RT_VISIBLE_CORES"
        )
    if local_rank >= len(cores):
        raise NeuronRuntimeError(f"LOCAL_RANK {local_rank} is higher than count {len(cores)}")
    return [cores[local_rank]]


def torch_xla_start(env: Mapping[str, str]) -> dict[str, str]:
    """The environment after torch-xla's import-time configuration (rule 1)."""
    out = dict(env)
    if out.get("NEURON_RT_ROOT_COMM_ID") is None:
        out["NEURON_RT_ROOT_COMM_ID"] = f"{out.get('MASTER_ADDR', 'localhost')}:{ROOT_PORT}"
    if "TORCHELASTIC_RUN_ID" not in out or out.get("XLA_USE_SPMD", "0") == "1":
        return out
    if "NEURON_PJRT_PROCESSES_NUM_DEVICES" not in out and "NEURON_PJRT_WORLD_SIZE" not in out:
        out["NEURON_PJRT_WORLD_SIZE"] = out.get("WORLD_SIZE", "1")
        out["PJRT_LOCAL_PROCESS_COUNT"] = out.get("LOCAL_WORLD_SIZE", "1")
    if not out.get(VISIBLE):
        out[VISIBLE] = out.get("LOCAL_RANK", "0")
    else:
        cores = remap_visible_cores(
            visible_cores(out[VISIBLE]), int(out.get("LOCAL_RANK", "0")), int(out.get("LOCAL_WORLD_SIZE", "1"))
        )
        out[VISIBLE] = ",".join(map(str, cores))
    out["NEURON_PJRT_PROCESS_INDEX"] = out.get("RANK", "0")
    out["PJRT_LOCAL_PROCESS_RANK"] = out.get("LOCAL_RANK", "0")
    return out


def start_job(envs: Sequence[Mapping[str, str]]) -> dict[int, list[int]]:
    """Start every process of a job as torch-xla, PJRT and the runtime would;
    process index -> the cores it holds. Raises NeuronRuntimeError where one of
    them would refuse or two processes would hold one core."""
    started = [torch_xla_start(env) for env in envs]
    roots = {env["NEURON_RT_ROOT_COMM_ID"] for env in started}
    if len(roots) != 1:
        raise NeuronRuntimeError(f"processes disagree on NEURON_RT_ROOT_COMM_ID: {sorted(roots)}")
    opened: dict[int, int] = {}
    by_index: dict[int, list[int]] = {}
    for env in started:
        index = int(env["NEURON_PJRT_PROCESS_INDEX"])
        cores = visible_cores(env[VISIBLE])
        has_counts, has_world = "NEURON_PJRT_PROCESSES_NUM_DEVICES" in env, "NEURON_PJRT_WORLD_SIZE" in env
        if has_counts and has_world:
            raise NeuronRuntimeError(
                f"process {index}: both NEURON_PJRT_PROCESSES_NUM_DEVICES and NEURON_PJRT_WORLD_SIZE are set"
            )
        if has_counts:
            counts = [int(c) for c in env["NEURON_PJRT_PROCESSES_NUM_DEVICES"].split(",")]
        elif has_world:
            counts = [1] * int(env["NEURON_PJRT_WORLD_SIZE"])
        else:
            raise NeuronRuntimeError(f"process {index}: PJRT has no process layout")
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
