"""The Neuron check child: `python -m ray_accel_neuron.check`.

Run by `NeuronPlugin.check` through `ray_accel.plugins.check_runner`, with
NEURON_RT_VISIBLE_CORES naming the cores of that one device. It runs a
small float32 matrix product on the device and compares it with the CPU's:

- with TorchNeuron (the `neuron` device, found as `ray_accel_neuron.torchneuron`
  finds it): on every visible core, `neuron:0` to `neuron:<count - 1>`
  (outside distributed mode TorchNeuron counts the visible cores);
- else with torch-xla: on the process's XLA device (its first visible core);
- else `unavailable`, naming why neither is here.

The tolerance is bfloat16's, not float32's: the Neuron compiler casts
float32 matrix products to bfloat16 by default (neuronx-cc `--auto-cast`,
default `matmult`).

Neuron Observer's on-demand health check is not used: it runs on every
visible NeuronCore of the node and needs all of them idle ("execute it only
when no workload is running on the node"), so it cannot check one device
while the host's other partitions serve (docs/checks.md).
"""

from __future__ import annotations

import sys
from typing import Any, Final

from ray_accel.core.checks import CheckOutcome
from ray_accel.plugins.check_runner import run_body
from ray_accel.plugins.check_work import matmul_check
from ray_accel_neuron import torchneuron, xla

MATMUL_N: Final = 256
MATMUL_RTOL: Final = 2e-2  # bfloat16 keeps 8 significant bits: 2**-8 ~ 4e-3 per product, summed


def products(torch: Any, devices: list[Any]) -> tuple[CheckOutcome, str]:
    """The product on each device; `failed` naming the first that differs."""
    worst = 0.0
    for device in devices:
        problem, error = matmul_check(torch, device, MATMUL_N, MATMUL_RTOL)
        if problem is not None:
            return CheckOutcome.FAILED, problem
        worst = max(worst, error)
    names = ", ".join(str(d) for d in devices)
    return CheckOutcome.PASSED, f"{MATMUL_N}x{MATMUL_N} product on {names} within {worst:.1e} of the CPU's"


def neuron_check() -> tuple[CheckOutcome, str]:
    """The check body: see the module's docstring."""
    try:
        import torch
    except ImportError as e:
        return CheckOutcome.UNAVAILABLE, f"torch is not importable here ({e})"
    no_torchneuron = torchneuron.problem_here()
    if no_torchneuron is None:
        count = int(getattr(torch, torchneuron.NEURON).device_count())
        if count < 1:
            return CheckOutcome.FAILED, "TorchNeuron sees no NeuronCore of the device"
        return products(torch, [torch.device(torchneuron.NEURON, i) for i in range(count)])
    no_xla = xla.problem_here()
    if no_xla is None:
        return products(torch, [xla.xla_device()])
    return CheckOutcome.UNAVAILABLE, f"no Neuron framework here: {no_torchneuron}; {no_xla}"


def main(argv: list[str]) -> int:
    if argv:
        print("usage: python -m ray_accel_neuron.check", file=sys.stderr)
        return 2
    return run_body(neuron_check)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
