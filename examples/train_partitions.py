"""Partitioned training: one TorchTrainer inside one partition (or spread over several).

    python examples/train_partitions.py --address ADDR --partition p0 --out DIR [--backend auto|gloo|xla]
        [--workers N] [--ray-only]

`--partition p0,p1` spreads the workers over both partitions, the same number
in each (one label selector per worker). `--ray-only` trains with Ray's own
API only (`ray.train.get_context()`, `ray.train.torch.prepare_model`, i.e.
DDP), no ray-accel helper in the loop.

Each worker writes what it saw (ranks as ray-accel and as Ray report them,
visible devices, losses, final weights) to DIR/rank<N>.json, because Ray
Train returns only rank 0's metrics. The model starts identical on every rank
(same seed) but each rank draws its own data, so identical final weights mean
the gradient reduction worked.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ENV_SEEN = ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "WORLD_SIZE", "PJRT_DEVICE")


def _batch(data: Any, w_true: Any) -> tuple[Any, Any]:
    import torch

    x = torch.randn(64, 8, generator=data)
    return x, x @ w_true + 0.5


def ray_context() -> dict[str, int]:
    """Ranks as Ray's own API reports them (what Ray's docs tell users to use)."""
    import ray.train

    rc = ray.train.get_context()
    return {
        "world_rank": rc.get_world_rank(),
        "world_size": rc.get_world_size(),
        "local_rank": rc.get_local_rank(),
        "local_world_size": rc.get_local_world_size(),
        "node_rank": rc.get_node_rank(),
    }


def _write(config: dict[str, Any], world_rank: int, report: dict[str, Any]) -> None:
    out = Path(config["out"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{world_rank}.json").write_text(json.dumps(report))


def rank_report(ctx: Any, env_seen: Sequence[str] = ENV_SEEN) -> dict[str, Any]:
    """What a worker reports of where it runs: ray-accel's ranks, Ray's own
    context, and the environment variables in `env_seen`."""
    return {
        "partition": ctx.partition,
        "world_rank": ctx.world_rank,
        "world_size": ctx.world_size,
        "local_rank": ctx.local_rank,
        "local_world_size": ctx.local_world_size,
        "node_rank": ctx.node_rank,
        "ray_context": ray_context(),
        "env": {k: os.environ.get(k) for k in env_seen},
    }


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
        x, y = _batch(data, w_true)
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = ((model(x).squeeze(-1) - y) ** 2).mean()
        loss.backward()
        sync_gradients(model)
        opt.step()
        if ctx.collective == "xla":
            import torch_xla

            torch_xla.sync()
        losses.append(float(loss.detach().cpu()))
    weights = torch.cat([p.detach().cpu().flatten() for p in model.parameters()]).tolist()
    mask_env = "NEURON_RT_VISIBLE_CORES" if ctx.device_family == "neuron" else "CUDA_VISIBLE_DEVICES"
    report = {
        **rank_report(ctx),
        "visible": os.environ.get(mask_env),
        "own_ids": list(ctx.own_ids),
        "backend": ctx.collective,
        "device": str(device),
        "losses": losses,
        "weights": weights,
        "resource_file": os.environ.get("RAYACCEL_RESOURCE_FILE"),
        "hook_env": os.environ.get("EXAMPLE_HOOK_TOKEN"),
    }
    _write(config, ctx.world_rank, report)
    if config.get("die_once_marker"):
        marker = Path(config["die_once_marker"])
        if ctx.world_rank == 1 and not marker.exists():
            marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), 9)  # a worker killed mid-run


def train_loop_ray_only(config: dict[str, Any]) -> None:
    """The same job written only against Ray's API: Ray's context, Ray's
    `prepare_model` (DistributedDataParallel over the job's process group)."""
    import ray.train
    import ray.train.torch
    import torch

    rc = ray.train.get_context()
    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(torch.nn.Linear(8, 1))
    device = ray.train.torch.get_device()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1000 + rc.get_world_rank())
    w_true = torch.linspace(-1, 1, 8)
    losses = []
    for _ in range(config["steps"]):
        x, y = _batch(data, w_true)
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = ((model(x).squeeze(-1) - y) ** 2).mean()
        loss.backward()  # DDP averages the gradients here
        opt.step()
        losses.append(float(loss.detach().cpu()))
    weights = torch.cat([p.detach().cpu().flatten() for p in model.parameters()]).tolist()
    report = {
        "ray_context": ray_context(),
        "wrapped": type(model).__name__,
        "env": {k: os.environ.get(k) for k in ENV_SEEN},
        "device": str(device),
        "losses": losses,
        "weights": weights,
    }
    _write(config, rc.get_world_rank(), report)


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
    workers: int = 2,
    ray_only: bool = False,
    train_v1: bool = False,
    plain_ray: bool = False,
    name: str | None = None,
) -> Any:
    """`partition`: one name, or a comma list to spread the workers evenly
    over several partitions. `train_v1`: Ray Train V1 (`RAY_TRAIN_V2_ENABLED=0`
    in this driver and its workers), which has no label selectors: place the
    workers by their resource amounts instead. `plain_ray`: Ray's own
    `TorchConfig` instead of ray-accel's (with `ray_only`), to compare.
    `name`: the run's name (its job's name in `ray-accel jobs`)."""
    if train_v1:
        # Read when ray.train is first imported, here and in every worker.
        os.environ["RAY_TRAIN_V2_ENABLED"] = "0"
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from ray_accel.train import AcceleratorTorchConfig

    if not ray.is_initialized():
        env = {"RAY_TRAIN_V2_ENABLED": "0"} if train_v1 else {}
        ray.init(address=address, log_to_driver=False, runtime_env={"env_vars": env} if env else None)
    resources: dict[str, float] = {"CPU": 0} if use_gpu else {"CPU": 0, resource: per_worker}
    parts = partition.split(",") if partition else []
    if len(parts) > 1 and workers % len(parts):
        raise ValueError(f"{workers} workers do not split evenly over partitions {partition}")
    # Grouped by partition, so that the selector index is the world rank.
    selector: Any = (
        [{"ray-accel.io/partition": p} for p in parts for _ in range(workers // len(parts))]
        if len(parts) > 1
        else ({"ray-accel.io/partition": partition} if partition else None)
    )
    scaling = (
        ScalingConfig(num_workers=workers, use_gpu=use_gpu, resources_per_worker=resources)
        if train_v1
        else ScalingConfig(
            num_workers=workers, use_gpu=use_gpu, resources_per_worker=resources, label_selector=selector
        )
    )
    trainer = TorchTrainer(
        train_loop_ray_only if ray_only else train_loop,
        train_loop_config={"steps": steps, "out": out, "die_once_marker": die_once_marker},
        torch_config=TorchConfig(backend="gloo")
        if plain_ray
        else AcceleratorTorchConfig(backend=backend, hooks=hooks or []),
        scaling_config=scaling,
        run_config=RunConfig(
            name=name or f"ray-accel-{(partition or 'job').replace(',', '-')}-{os.getpid()}",
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
    ap.add_argument("--workers", type=int, default=2, help="number of training workers")
    ap.add_argument("--ray-only", action="store_true", help="train with Ray's API only (prepare_model, DDP)")
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
        workers=args.workers, ray_only=args.ray_only,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
