"""The `neuron` collective: TorchNeuron, the native PyTorch backend of Neuron 2.33.

What ray-accel relies on, and where it comes from. [doc]: the public Neuron
2.33 documentation (awsdocs-neuron.readthedocs-hosted.com). [src]: TorchNeuron's
pre-release development source (`torch_neuronx/...`, April 2026, version
0.1.0), read for behaviour only and not confirmed against the released
wheels; docs/torchneuron.md says which is which.

- Generations: Trainium2 and Trainium3 only [doc: release-notes/components/
  torchneuron.html, "Move the model and its inputs to neuron to run them on
  Trainium2 or Trainium3"; setup/pytorch/index "Supported Instances: Trn2, Trn3"].
- How it is found: `import torch` loads every `torch.backends` entry point
  unless TORCH_DEVICE_BACKEND_AUTOLOAD is other than "1" (torch 2.13,
  `torch/__init__.py` `_import_device_backends`); "No import torch_neuronx is
  needed: PyTorch autoloads" it [doc: torch/index]. Loaded, it names the
  PrivateUse1 device `neuron` [doc: "adds the neuron device through the
  PyTorch PrivateUse1 extension"] and registers the `neuron` process-group
  backend [doc: torch/guides/torch-distributed, `backend="neuron"`;
  src: `distributed/backend.py`, `dist.Backend.register_backend("neuron", ...)`].
  Both are looked for here, by feature: the distribution's name,
  torch-neuronx, is also the older PyTorch/XLA package's.
- The group: `dist.init_process_group(backend="neuron", init_method="env://")`
  with RANK and WORLD_SIZE; the guide reads LOCAL_RANK [doc]. TorchNeuron
  takes LOCAL_RANK and LOCAL_WORLD_SIZE when both are set, else groups the
  ranks by host IP through the store [src: `_set_rt_visible_cores`]: both are
  set here, per raylet, as every ray-accel rank variable.
- One logical NeuronCore per process in distributed mode [src:
  `_neuron_runtime_setup` asserts the visible vNC count is 1, "Attempted to
  have more than one device per process in distributed setup"; doc: the
  distributed tutorial runs 64 workers on the 64 logical cores of a
  trn2.48xlarge].
- NEURON_RT_VISIBLE_CORES: TorchNeuron sets it to LOCAL_RANK unless it is set
  already [src]. LOCAL_RANK counts per raylet, so that default would open
  another partition's core: ray-accel sets the worker's own core before the
  group is made. The runtime reads one index or an inclusive range, and a
  core belongs to the process that reserved it until that process ends
  [doc: neuron-runtime/guides/configuration-guide].
- The runtime must not start before the first process group [src: "Neuron
  runtime should not be initialized before the init_process_group."]: ray-accel
  names the worker's device (`torch.device`) and touches no device before it.
- The device: `torch.device("neuron")` [doc]; its index is the process's
  LOCAL_RANK and an index below it is refused [src: `NeuronDevice.cpp`,
  "PyTorch Device ID will always be equal to the local rank of the process"],
  so a worker's device is `neuron:<LOCAL_RANK>`.
- NEURON_RT_ROOT_COMM_ID: set by TorchNeuron when unset, to MASTER_ADDR and a
  port rank 0 found free [src: `_set_root_comm_id`]. ray-accel sets the same
  thing itself: rank 0's node IP (reachable from every host, unlike
  localhost) and a port free on rank 0's host.
- Several hosts need EFA [doc: the guide's prerequisites]; TorchNeuron's
  multi-node example sets FI_PROVIDER=efa, FI_EFA_USE_DEVICE_RDMA=1 and
  FI_EFA_FORK_SAFE=1 [src: `examples/multi_node_tests/run_parallel_training.sh`].
- A process forked after the runtime started cannot use it ("Cannot
  re-initialize Neuron runtime in forked subprocess ... use the 'spawn' start
  method") [src: `os.register_at_fork` in `__init__.py`]: ray-accel forks
  nothing in a training worker; a DataLoader with workers needs
  `multiprocessing_context="spawn"`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final

from ray_accel_neuron import arch

NEURON: Final = "neuron"
AUTOLOAD_ENV: Final = "TORCH_DEVICE_BACKEND_AUTOLOAD"
ENTRY_POINT_GROUP: Final = "torch.backends"
# Generations TorchNeuron supports, and those it is documented not to (the
# others are unknown to this table, not refused).
GENERATIONS: Final = (arch.TRAINIUM2.accelerator_type, arch.TRAINIUM3.accelerator_type)
UNSUPPORTED: Final = tuple(g.accelerator_type for g in (arch.TRAINIUM, arch.INFERENTIA2, arch.INFERENTIA))
RULE: Final = (
    "TorchNeuron runs exactly one logical NeuronCore per process in distributed mode "
    "('Attempted to have more than one device per process in distributed setup')"
)


def stack_problem(
    registered: bool, privateuse1: str, entry_points: Sequence[str], autoload: str | None, torch_version: str
) -> str | None:
    """Why TorchNeuron is not usable in this process, from what `import torch`
    left behind; None where it is. `registered`: a `neuron` process-group
    backend exists; `privateuse1`: the PrivateUse1 device's name;
    `entry_points`: the `torch.backends` entry points installed;
    `autoload`: TORCH_DEVICE_BACKEND_AUTOLOAD as set (None: unset)."""
    if registered and privateuse1 == NEURON:
        return None
    if registered:
        return (
            f"a 'neuron' process-group backend is registered but the PrivateUse1 device is named "
            f"{privateuse1!r}, not 'neuron' (another package renamed it; only one can per process)"
        )
    if privateuse1 == NEURON:
        return "the PrivateUse1 device is named 'neuron' but no 'neuron' process-group backend is registered"
    names = ", ".join(entry_points)
    if entry_points and autoload not in (None, "1"):
        return (
            f"{AUTOLOAD_ENV}={autoload} kept `import torch` from loading the {ENTRY_POINT_GROUP} "
            f"entry points ({names}), so no 'neuron' device or process group is registered"
        )
    if entry_points:
        return (
            f"`import torch` loaded the {ENTRY_POINT_GROUP} entry points ({names}) but none registered "
            "a 'neuron' device and process group"
        )
    return (
        f"TorchNeuron is not installed: no {ENTRY_POINT_GROUP} entry point registers a 'neuron' device "
        f"(torch-neuronx 2.13.3.0 with PyTorch 2.13, or 2.14.3.0 with 2.14, Neuron 2.33; this worker has "
        f"torch {torch_version})"
    )


def problem_here() -> str | None:
    """`stack_problem` for this process (imports torch, which loads the
    entry points; touches no device and starts no runtime)."""
    from importlib.metadata import entry_points

    import torch
    import torch.distributed as dist

    names = sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})
    return stack_problem(
        NEURON in dist.Backend.backend_list,
        torch._C._get_privateuse1_backend_name(),
        names,
        os.environ.get(AUTOLOAD_ENV),
        str(torch.__version__),
    )


def device(local_rank: str | None) -> Any:
    """The worker's `neuron` device: TorchNeuron numbers it by LOCAL_RANK.
    Naming it starts nothing."""
    import torch

    return torch.device(NEURON) if local_rank is None else torch.device(NEURON, int(local_rank))
