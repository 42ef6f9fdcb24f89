"""Partitioned training: one 2-worker TorchTrainer inside one partition.

    python examples/train_partitions.py --address ADDR --partition p0 --out DIR [--backend auto|gloo|xla]

Each worker writes what it saw (ranks, visible devices, losses, final weights)
to DIR/rank<N>.json, because Ray Train returns only rank 0's metrics. The
model starts identical on every rank (same seed) but each rank draws its own
data, so identical final weights mean the gradient reduction worked.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any


def train_loop(config: dict[str, Any]) -> None:
    import torch

    from ray_accel.train import get_context, get_device, sync_gradients

    ctx = get_context()
    device = get_device()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1000 + ctx.world_rank)
    w_true = torch.linspace(-1, 1, 8)
    losses = []
    for _ in range(config["steps"]):
        x = torch.randn(64, 8, generator=data)
        y = x @ w_true + 0.5
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = ((model(x).squeeze(-1) - y) ** 2).mean()
        loss.backward()
        sync_gradients(model)
        opt.step()
        if ctx.backend == "xla":
            import torch_xla

            torch_xla.sync()
        losses.append(float(loss.detach().cpu()))
    weights = torch.cat([p.detach().cpu().flatten() for p in model.parameters()]).tolist()
    mask_env = "NEURON_RT_VISIBLE_CORES" if ctx.device_family == "neuron" else "CUDA_VISIBLE_DEVICES"
    report = {
        "partition": ctx.partition,
        "world_rank": ctx.world_rank,
        "local_rank": ctx.local_rank,
        "local_world_size": ctx.local_world_size,
        "node_rank": ctx.node_rank,
        "env": {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "PJRT_DEVICE")},
        "visible": os.environ.get(mask_env),
        "own_ids": list(ctx.own_ids),
        "backend": ctx.backend,
        "device": str(device),
        "losses": losses,
        "weights": weights,
        "resource_file": os.environ.get("RAYACCEL_RESOURCE_FILE"),
        "hook_env": os.environ.get("EXAMPLE_HOOK_TOKEN"),
    }
    out = Path(config["out"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{ctx.world_rank}.json").write_text(json.dumps(report))
    if config.get("die_once_marker"):
        marker = Path(config["die_once_marker"])
        if ctx.world_rank == 1 and not marker.exists():
            marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), 9)  # a worker killed mid-run


def run_job(
    address: str | None,
    partition: str | None,
    out: str,
    backend: str = "auto",
    steps: int = 30,
    hooks: list[Any] | None = None,
    max_failures: int = 0,
    die_once_marker: str | None = None,
    resource: str = "neuron_cores",
    per_worker: float = 2,
    use_gpu: bool = False,
) -> Any:
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from ray_accel.train import AcceleratorTorchConfig

    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)
    resources: dict[str, float] = {"CPU": 0} if use_gpu else {"CPU": 0, resource: per_worker}
    scaling = ScalingConfig(
        num_workers=2,
        use_gpu=use_gpu,
        resources_per_worker=resources,
        label_selector={"ray-accel.io/partition": partition} if partition else None,
    )
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"steps": steps, "out": out, "die_once_marker": die_once_marker},
        torch_config=AcceleratorTorchConfig(backend=backend, hooks=hooks or []),
        scaling_config=scaling,
        run_config=RunConfig(
            name=f"ray-accel-{partition or 'job'}-{os.getpid()}",
            storage_path=str(Path(out).resolve() / "ray_results"),
            failure_config=FailureConfig(max_failures=max_failures),
        ),
    )
    return trainer.fit()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--address")
    ap.add_argument("--partition")
    ap.add_argument("--out", required=True)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--hooks", default="", help="comma list of module:Class hook classes")
    ap.add_argument("--resource", default="neuron_cores", help="accelerator resource per worker")
    ap.add_argument("--per-worker", type=float, default=2, help="amount of it per worker")
    args = ap.parse_args()
    import importlib

    hooks = []
    for spec in filter(None, args.hooks.split(",")):
        module, _, name = spec.partition(":")
        hooks.append(getattr(importlib.import_module(module), name))
    use_gpu = args.resource == "GPU"
    run_job(
        args.address, args.partition, args.out, args.backend, args.steps, hooks,
        resource=args.resource, per_worker=args.per_worker, use_gpu=use_gpu,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
