"""Processes that load the fake TorchNeuron, for tests/unit/test_fake_torchneuron.py.

    python -m tests.fakes.torchneuron_scenarios <scenario> '<json arguments>'

run with the fake's site directory on PYTHONPATH (so `import torch` loads it,
which is why they are processes of their own). Each prints one JSON line.

- worker: a training worker as ray-accel starts one: the environment given
  (what `NeuronRuntime.worker_env` made), TorchNeuron found by feature, the
  `neuron` group, an all-reduce, the device ray-accel names, the device
  index rules; optionally a second process opening the same core, and a fork.
- early: the runtime started (a device's properties read) before the group.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

MODULE = "tests.fakes.torchneuron_scenarios"


def _error(fn: Any) -> str | None:
    try:
        fn()
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


def worker(args: dict[str, Any]) -> dict[str, Any]:
    from ray_accel_neuron import torchneuron
    from ray_accel_neuron.runtime import NeuronRuntime

    found = torchneuron.problem_here()  # imports torch: the entry point loads the fake
    import torch
    import torch.distributed as dist
    import torch_neuronx

    os.environ.update(args["env"])
    before = {"device_count": torch.neuron.device_count(), "started": torch_neuronx.is_neuron_runtime_initialized()}
    rank, world = int(args["env"]["RANK"]), int(args["env"]["WORLD_SIZE"])
    dist.init_process_group("neuron", init_method="env://", rank=rank, world_size=world)
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    local = torch.neuron.current_device()
    out: dict[str, Any] = {
        "problem": found,
        "before": before,
        "backend": str(dist.get_backend()),
        "device": str(NeuronRuntime().select_device("neuron", (), ())),
        "device_count": torch.neuron.device_count(),
        "current_device": local,
        "visible": os.environ.get("NEURON_RT_VISIBLE_CORES"),
        "sum": value.item(),
        "below": _error(lambda: torch.neuron.set_device(local - 1)),
        "past": _error(lambda: torch.neuron.set_device(local + 1)),
    }
    if args.get("second_opens"):
        # Another process asking for this process's core, while it holds it.
        env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
        env["MASTER_PORT"] = str(args["second_opens"])
        second = subprocess.run(
            [sys.executable, "-m", MODULE, "worker", json.dumps({"env": env})],
            capture_output=True,
            text=True,
            timeout=120,
        )
        out["second"] = second.stderr.strip().splitlines()[-1:] if second.returncode else "opened"
    if args.get("fork"):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: the runtime's process forked
            os.close(read)
            os.write(write, (_error(lambda: torch.neuron.get_device_properties()) or "usable").encode())
            os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)
        with os.fdopen(read) as f:
            out["forked_child"] = f.read()
    dist.barrier()
    out["collectives"] = dict(torch_neuronx._state.collectives)
    dist.destroy_process_group()
    return out


def early(args: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    os.environ.update(args["env"])
    torch.neuron.get_device_properties()
    return {"error": _error(lambda: dist.init_process_group("neuron", init_method="env://", rank=0, world_size=1))}


if __name__ == "__main__":
    scenario, raw = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps({"worker": worker, "early": early}[scenario](raw)))
