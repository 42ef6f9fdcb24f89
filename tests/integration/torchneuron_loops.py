"""The DDP job of tests/integration/test_torchneuron.py, and its reference.

Every rank trains a replica on its own shard of one global batch per step;
DistributedDataParallel averages the gradients, so after the run every rank
holds the weights one process gets training on the whole batch
(`reference_weights`, computed by the test itself with plain torch).

On Trainium the model and its inputs go to `get_device()` (`neuron:<LOCAL_RANK>`).
The fake TorchNeuron has no `neuron` kernels, so this loop keeps them on the
CPU and the fake's `neuron` group reduces CPU tensors (README.md: what the
fake cannot show).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

FEATURES = 8
LR = 0.05


def global_batch(step: int, size: int) -> tuple[Any, Any]:
    import torch

    gen = torch.Generator().manual_seed(100 + step)
    x = torch.randn(size, FEATURES, generator=gen)
    return x, x @ torch.linspace(-1, 1, FEATURES) + 0.5


def _model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Linear(FEATURES, 1)


def _step(model: Any, opt: Any, x: Any, y: Any) -> float:
    opt.zero_grad()
    loss = ((model(x).squeeze(-1) - y) ** 2).mean()
    loss.backward()
    opt.step()
    return float(loss.detach())


def _weights(model: Any) -> list[float]:
    import torch

    return torch.cat([p.detach().cpu().flatten() for p in model.parameters()]).tolist()


def reference_weights(world: int, per_rank: int, steps: int) -> list[float]:
    """One process, the whole global batch at every step."""
    import torch

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(steps):
        _step(model, opt, *global_batch(step, world * per_rank))
    return _weights(model)


def ddp_loop(config: dict[str, Any]) -> None:
    import ray.train
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from ray_accel.train import get_context, get_device

    ctx = get_context()
    device = get_device()
    model = DistributedDataParallel(_model())
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    per, rank = config["per_rank"], ctx.world_rank
    losses = []
    for step in range(config["steps"]):
        x, y = global_batch(step, ctx.world_size * per)
        losses.append(_step(model, opt, x[rank * per : (rank + 1) * per], y[rank * per : (rank + 1) * per]))
    rc = ray.train.get_context()
    neuron = getattr(torch, "neuron", None)
    report = {
        "world_rank": rank,
        "world_size": ctx.world_size,
        "local_rank": ctx.local_rank,
        "local_world_size": ctx.local_world_size,
        "node_rank": ctx.node_rank,
        "partition": ctx.partition,
        "ray_context": {
            "world_rank": rc.get_world_rank(),
            "world_size": rc.get_world_size(),
            "local_rank": rc.get_local_rank(),
            "local_world_size": rc.get_local_world_size(),
            "node_rank": rc.get_node_rank(),
        },
        "backend": ctx.collective,
        "backend_reason": ctx.collective_reason,
        "group": str(dist.get_backend()),
        "device": str(device),
        "privateuse1": torch._C._get_privateuse1_backend_name(),
        "device_count": neuron.device_count() if neuron else None,
        "current_device": neuron.current_device() if neuron else None,
        "visible": os.environ.get("NEURON_RT_VISIBLE_CORES"),
        "own_ids": list(ctx.own_ids),
        "env": {k: os.environ.get(k) for k in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "NEURON_RT_ROOT_COMM_ID")},
        "pid": os.getpid(),
        "losses": losses,
        "weights": _weights(model.module),
    }
    out = Path(config["out"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(json.dumps(report))
