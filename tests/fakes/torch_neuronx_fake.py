"""A fake of TorchNeuron (torch-neuronx 2.13.3.0 / 2.14.3.0, Neuron 2.33) that
runs on the CPU, for tests without Trainium.

`tests/fakes/torchneuron.py` installs this file as the module `torch_neuronx`
with a `torch.backends` entry point in a site directory, so that `import
torch` loads it exactly as it loads the real package. That directory goes on
the PYTHONPATH of a test cluster's raylets only (their workers inherit it),
never into the test process: the PrivateUse1 device can be renamed once per
process. Importing this file does nothing; `_autoload` does the registering.

Each rule cites its source. [doc]: the public Neuron 2.33 documentation
(awsdocs-neuron.readthedocs-hosted.com); [src]: TorchNeuron's pre-release
development source (torch_neuronx/..., April 2026), read for behaviour only.

1. Loaded by `import torch` through the `torch.backends` entry point
   `torch_neuronx = torch_neuronx:_autoload` [doc: torch/index "No import
   torch_neuronx is needed: PyTorch autoloads"; src: pyproject.toml]. It names
   the PrivateUse1 device `neuron` [doc: release notes 2.33.0] and registers
   the `neuron` process-group backend [doc: torch/guides/torch-distributed;
   src: distributed/backend.py]. The real one registers it for the `neuron`
   device; this one for the CPU (`devices=["cpu"]`), with gloo underneath:
   it has no `neuron` kernels, so tensors stay on the CPU.
2. The first process group sets the runtime up [src: `_neuron_runtime_setup`]:
   - LOCAL_RANK and LOCAL_WORLD_SIZE are taken when both are set; otherwise
     the real one groups ranks by host IP through the store, which this fake
     does not model: it refuses instead [src: `_set_rt_visible_cores`];
   - NEURON_RT_VISIBLE_CORES defaults to LOCAL_RANK, a value already set is
     kept [src: `_set_rt_visible_cores`];
   - a runtime started before it is an error: "Neuron runtime should not be
     initialized before the init_process_group." [src];
   - exactly one visible core: "Attempted to have more than one device per
     process in distributed setup" [src: the `_vnc_count() == 1` assert].
3. NEURON_RT_VISIBLE_CORES is "a single NeuronCore index or an inclusive
   range", and a core reserved by a process "cannot be used by another
   process at all, until the process reserving that NeuronCore is
   terminated" [doc: neuron-runtime/guides/configuration-guide]: with a
   record directory, each core is a lock file held until the process ends.
4. Devices [src: csrc/core/NeuronDevice.cpp]: the device index of a process
   is its LOCAL_RANK; `device_count()` is LOCAL_WORLD_SIZE once distributed
   init has run, else the visible core count; `current_device()` is the
   local rank; an index below it: "Attempted to access device that doesn't
   attach to this process"; past the last: "Device index N is out of range.
   Valid range is A to B for this process" [src: tests/device]. Touching a
   device's properties starts the runtime (`_lazy_init`) [src].
5. A child forked after the runtime started cannot use it: "Cannot
   re-initialize Neuron runtime in forked subprocess. To use Neuron with
   multiprocessing, use the 'spawn' start method" [src: `os.register_at_fork`
   in __init__.py].
6. `barrier` on the default group only ("Barrier is implemented only for
   default group"); `monitored_barrier` and `recv_anysource` raise
   NotImplementedError [src: ProcessGroupNeuron]. Point-to-point is not
   modelled (absent from the pre-release source; 2.33 advertises pipeline
   parallelism, which needs it).

What it records, for tests to read: with FAKE_TORCHNEURON_DIR set, each
process writes `<dir>/<pid>.json` (its ranks, visible core, device answers,
the count of every collective it ran, forks after the runtime started) after
each change, and holds `<dir>/cores/<core>.lock`.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import types
from datetime import timedelta
from pathlib import Path
from typing import Any

RECORD_ENV = "FAKE_TORCHNEURON_DIR"
DEVICE = "neuron"

BEFORE_PG = "Neuron runtime should not be initialized before the init_process_group."
ONE_DEVICE = "Attempted to have more than one device per process in distributed setup"
NOT_ATTACHED = "Attempted to access device that doesn't attach to this process"
BAD_FORK = (
    "Cannot re-initialize Neuron runtime in forked subprocess. To use Neuron with multiprocessing, "
    "use the 'spawn' start method"
)
BARRIER_DEFAULT_ONLY = "Barrier is implemented only for default group"


class _State:
    """This process's runtime, as the fake models it."""

    def __init__(self) -> None:
        self.loaded = False
        self.runtime_started = False
        self.distributed = False
        self.bad_fork = False
        self.forked_from: int | None = None  # the runtime's process, in a child forked from it
        self.groups = 0
        self.local_rank = 0
        self.local_world_size = 1
        self.rank: int | None = None
        self.world_size: int | None = None
        self.cores: list[int] = []
        self.collectives: dict[str, int] = {}
        self.events: list[str] = []
        self.locks: list[Any] = []
        self.lock = threading.Lock()


_state = _State()


def _record_dir() -> Path | None:
    value = os.environ.get(RECORD_ENV)
    return Path(value) if value else None


def _record() -> None:
    where = _record_dir()
    if where is None:
        return
    where.mkdir(parents=True, exist_ok=True)
    row = {
        "pid": os.getpid(),
        "rank": _state.rank,
        "world_size": _state.world_size,
        "local_rank": _state.local_rank,
        "local_world_size": _state.local_world_size,
        "visible_cores": os.environ.get("NEURON_RT_VISIBLE_CORES"),
        "cores": _state.cores,
        "runtime_started": _state.runtime_started,
        "forked_from": _state.forked_from,
        "device_count": device_count(),
        "current_device": current_device(),
        "collectives": dict(_state.collectives),
        "events": list(_state.events),
    }
    tmp = where / f".{os.getpid()}.json.tmp"
    tmp.write_text(json.dumps(row))
    tmp.replace(where / f"{os.getpid()}.json")


def parse_visible_cores(value: str) -> list[int]:
    """NEURON_RT_VISIBLE_CORES as the runtime documents it: one index or an
    inclusive range `lo-hi`."""
    text = value.strip()
    lo, sep, hi = text.partition("-")
    if not lo.isdigit() or (sep and not hi.isdigit()):
        raise RuntimeError(f"NEURON_RT_VISIBLE_CORES={value!r}: expected a NeuronCore index or a range lo-hi")
    first, last = int(lo), int(hi) if sep else int(lo)
    if last < first:
        raise RuntimeError(f"NEURON_RT_VISIBLE_CORES={value!r}: the range ends before it starts")
    return list(range(first, last + 1))


def _visible() -> list[int]:
    value = os.environ.get("NEURON_RT_VISIBLE_CORES")
    if value is not None:
        return parse_visible_cores(value)
    count = os.environ.get("NEURON_RT_NUM_CORES")
    return list(range(int(count))) if count else []


def _check_fork() -> None:
    if _state.bad_fork:
        raise RuntimeError(BAD_FORK)


def _reserve(cores: list[int]) -> None:
    """Hold each core for the life of this process, as the runtime does."""
    where = _record_dir()
    if where is None:
        return
    (where / "cores").mkdir(parents=True, exist_ok=True)
    for core in cores:
        f = open(where / "cores" / f"{core}.lock", "a+")  # held until the process ends
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            raise RuntimeError(
                f"NeuronCore {core} is reserved by another process: a core cannot be used by another process "
                "until the process reserving it is terminated"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        _state.locks.append(f)


def _start_runtime() -> None:
    """nrt_init: opens the visible cores."""
    _check_fork()
    if _state.runtime_started:
        return
    cores = _visible()
    _reserve(cores)
    _state.cores = cores
    _state.runtime_started = True
    _state.events.append("runtime started")
    _record()


def _lazy_init() -> None:
    _start_runtime()


def is_neuron_runtime_initialized() -> bool:
    return _state.runtime_started


def device_count() -> int:
    if _state.distributed:
        return _state.local_world_size
    return len(_visible())


def current_device() -> int:
    return _state.local_rank if _state.distributed else 0


def _check_index(index: int) -> None:
    first = _state.local_rank if _state.distributed else 0
    if index < first:
        raise RuntimeError(NOT_ATTACHED)
    last = first + (1 if _state.distributed else device_count()) - 1
    if index > last:
        raise RuntimeError(f"Device index {index} is out of range. Valid range is {first} to {last} for this process")


def set_device(index: int) -> None:
    _check_index(int(index))


def get_device_properties(index: int | None = None) -> dict[str, Any]:
    _lazy_init()
    i = current_device() if index is None else int(index)
    _check_index(i)
    return {"index": i, "cores": _state.cores}


def _after_fork_in_child() -> None:
    if _state.runtime_started:
        _state.bad_fork = True
        _state.forked_from = os.getppid()
        _state.events.append("forked from the runtime's process")
        _state.locks.clear()  # the parent's reservations, not this process's
        _record()


def _setup_runtime(rank: int, world_size: int) -> None:
    """The first process group's runtime set-up [src: _set_rt_visible_cores,
    _neuron_runtime_setup]."""
    _check_fork()
    local_rank, local_world = os.environ.get("LOCAL_RANK"), os.environ.get("LOCAL_WORLD_SIZE")
    if local_rank is None or local_world is None:
        raise RuntimeError(
            "fake TorchNeuron: LOCAL_RANK and LOCAL_WORLD_SIZE are not both set; TorchNeuron would group the "
            "ranks by host IP through the store, which this fake does not model"
        )
    if not os.environ.get("NEURON_RT_VISIBLE_CORES"):
        os.environ["NEURON_RT_VISIBLE_CORES"] = local_rank
    if _state.runtime_started:
        raise AssertionError(BEFORE_PG)
    if len(_visible()) != 1:
        raise AssertionError(ONE_DEVICE)
    _state.rank, _state.world_size = rank, world_size
    _state.local_rank, _state.local_world_size = int(local_rank), int(local_world)
    _start_runtime()
    _state.distributed = True
    _record()


def _process_group_class() -> type:
    import torch.distributed as dist

    class ProcessGroupNeuron(dist.ProcessGroup):  # type: ignore[misc]
        """The `neuron` group: every collective counted, then run by gloo."""

        def __init__(self, store: Any, rank: int, size: int, timeout: timedelta, default: bool) -> None:
            super().__init__(rank, size)
            self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
            self._default = default

        def getBackendName(self) -> str:  # torch's name for it
            return DEVICE

        def _run(self, name: str, *args: Any, **kwargs: Any) -> Any:
            _check_fork()
            with _state.lock:
                _state.collectives[name] = _state.collectives.get(name, 0) + 1
            work = getattr(self._gloo, name)(*args, **kwargs)
            _record()
            return work

        def allreduce(self, *args: Any, **kwargs: Any) -> Any:
            return self._run("allreduce", *args, **kwargs)

        def allreduce_coalesced(self, *args: Any, **kwargs: Any) -> Any:
            return self._run("allreduce_coalesced", *args, **kwargs)

        def allgather(self, *args: Any, **kwargs: Any) -> Any:
            return self._run("allgather", *args, **kwargs)

        def _allgather_base(self, *args: Any, **kwargs: Any) -> Any:
            return self._run("_allgather_base", *args, **kwargs)

        def allgather_into_tensor_coalesced(self, *args: Any, **kwargs: Any) -> Any:
            return self._run("allgather_into_tensor_coalesced", *args, **kwargs)

        def broadcast(self, *args: Any, **kwargs: Any) -> Any:
            return self._run("broadcast", *args, **kwargs)

        def reduce(self, *args: Any, **kwargs: Any) -> Any:
            return self._run("reduce", *args, **kwargs)

        def reduce_scatter(self, *args: Any, **kwargs: Any) -> Any:
            return self._run("reduce_scatter", *args, **kwargs)

        def _reduce_scatter_base(self, *args: Any, **kwargs: Any) -> Any:
            return self._run("_reduce_scatter_base", *args, **kwargs)

        def alltoall_base(self, *args: Any, **kwargs: Any) -> Any:
            return self._run("alltoall_base", *args, **kwargs)

        def gather(self, *args: Any, **kwargs: Any) -> Any:
            return self._run("gather", *args, **kwargs)

        def scatter(self, *args: Any, **kwargs: Any) -> Any:
            return self._run("scatter", *args, **kwargs)

        def barrier(self, *args: Any, **kwargs: Any) -> Any:
            if not self._default:
                raise RuntimeError(BARRIER_DEFAULT_ONLY)
            return self._run("barrier", *args, **kwargs)

        def monitored_barrier(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("monitored_barrier is not implemented by ProcessGroupNeuron")

        def recv_anysource(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("recv_anysource is not implemented by ProcessGroupNeuron")

    return ProcessGroupNeuron


def _create_process_group(store: Any, rank: int, size: int, timeout: timedelta) -> Any:
    first = _state.groups == 0
    if first:
        _setup_runtime(rank, size)
    _state.groups += 1
    return _process_group_class()(store, rank, size, timeout, default=first)


def _autoload() -> None:
    """The `torch.backends` entry point, run inside `import torch` (one that
    raises makes `import torch` fail, naming it)."""
    if _state.loaded:
        return
    _state.loaded = True
    import torch.distributed as dist
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    module = types.SimpleNamespace(
        is_available=lambda: True,
        is_initialized=is_neuron_runtime_initialized,
        current_device=current_device,
        device_count=device_count,
        set_device=set_device,
        get_device_properties=get_device_properties,
        _lazy_init=_lazy_init,
        _is_in_bad_fork=lambda: _state.bad_fork,
        manual_seed_all=lambda seed: None,
    )
    _setup_privateuseone_for_python_backend(rename=DEVICE, backend_module=module)
    dist.Backend.register_backend(DEVICE, _create_process_group, devices=["cpu"])
    os.register_at_fork(after_in_child=_after_fork_in_child)
