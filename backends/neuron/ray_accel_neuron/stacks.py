"""Which training stack a Neuron worker has, and which collective "auto" picks.

Two stacks train on NeuronCores. TorchNeuron (the `neuron` collective,
`torchneuron.py`) from Neuron 2.33, on Trainium2 and Trainium3; PyTorch/XLA
(the `xla` collective, `xla.py`), whose training support ended with Neuron
2.29 ("Starting with Neuron Release 2.30.0, PyTorch/XLA is no longer
supported for training workloads on Trainium", the Neuron announcement of
2026-05-20) and whose package last shipped in Neuron 2.31. The choice is made
in the worker, from what is installed there: the driver's machine may have
neither.
"""

from __future__ import annotations

from dataclasses import dataclass

from ray_accel.core.errors import InputError
from ray_accel.plugins.runtime import CollectiveChoice
from ray_accel_neuron import torchneuron, xla
from ray_accel_neuron.torchneuron import GENERATIONS, NEURON, UNSUPPORTED
from ray_accel_neuron.xla import XLA


@dataclass(frozen=True)
class Stacks:
    """What is missing of each stack in a worker; None: that stack is there."""

    torchneuron: str | None
    xla: str | None


def stacks_here() -> Stacks:
    return Stacks(torchneuron=torchneuron.problem_here(), xla=xla.problem_here())


def _generation(accelerator_type: str | None) -> str:
    return accelerator_type or "a Neuron device of unknown type"


def _fallback(stacks: Stacks, fallback: str | None, why: str) -> CollectiveChoice:
    """The collective where TorchNeuron is not used: `fallback` as given (the
    mock's gloo on the CPU), else the PyTorch/XLA stack, which must be there."""
    if fallback is not None:
        return CollectiveChoice(fallback, why)
    if stacks.xla is None:
        return CollectiveChoice(XLA, f"{why} (PyTorch/XLA instead: Neuron supports it for training up to 2.29)")
    raise InputError(
        f"backend 'auto' finds no Neuron training stack in this worker: {why}; {stacks.xla}. "
        "Install TorchNeuron (Trainium2, Trainium3) or torch-xla, or ask for backend='gloo' to train on the CPU"
    )


def choose(accelerator_type: str | None, stacks: Stacks, fallback: str | None) -> CollectiveChoice:
    """The collective "auto" picks on `accelerator_type` with `stacks`
    installed. TorchNeuron where it is installed and the generation is one it
    supports (or one nobody has said it does not: unknown is not refused, it
    is named); otherwise the fallback, saying why."""
    gen = _generation(accelerator_type)
    if accelerator_type in UNSUPPORTED:
        installed = "is installed but " if stacks.torchneuron is None else ""
        why = f"TorchNeuron {installed}supports Trainium2 and Trainium3 only, and this worker's devices are {gen}"
        return _fallback(stacks, fallback, why)
    if stacks.torchneuron is not None:
        return _fallback(stacks, fallback, f"no TorchNeuron in this worker ({stacks.torchneuron})")
    if accelerator_type in GENERATIONS:
        return CollectiveChoice(NEURON)
    return CollectiveChoice(
        NEURON,
        f"TorchNeuron is installed and this worker's devices are {gen}, not one it is documented for "
        f"({', '.join(GENERATIONS)})",
    )
