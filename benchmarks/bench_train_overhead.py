"""Question: what does AcceleratorTorchConfig cost over Ray's stock TorchConfig?

The same small job (2 workers, gloo, a DDP-wrapped linear model, 200 steps)
runs under both configs on a local Ray (4 logical CPUs). Measured per run:
`fit()` wall time, time from calling `fit()` to the end of the first step, and
steps per second inside the loop. Medians of several runs, alternating the two
configs, after one untimed warm-up fit (imports, worker processes);
baseline: Ray's stock TorchConfig.

    python benchmarks/bench_train_overhead.py [--runs 3] [--steps 200] [--quick] [--json]

`--quick`: one run of each config, 20 steps, no warm-up fit (for CI: it keeps
the code path working; its figures are single samples). Ctrl-C or SIGTERM shuts the local
Ray down (every process `ray.init` started) before it exits 130.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import run_main, say, shielded, sigterm_as_interrupt


def loop(config: dict[str, Any]) -> None:
    import ray.train
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    rank = ray.train.get_context().get_world_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 32), torch.randn(64)
    first = None
    start = time.time()
    for step in range(config["steps"]):
        opt.zero_grad()
        ((model(x).squeeze(-1) - y) ** 2).mean().backward()
        opt.step()
        if step == 0:
            first = time.time()
    end = time.time()
    dist.barrier()
    if rank == 0:
        Path(config["out"]).write_text(json.dumps({"first": first, "start": start, "end": end}))


def run(kind: str, steps: int) -> dict[str, float]:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from ray_accel.train import AcceleratorTorchConfig

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "times.json"
        config = TorchConfig(backend="gloo") if kind == "stock" else AcceleratorTorchConfig(backend="gloo")
        trainer = TorchTrainer(
            loop,
            train_loop_config={"steps": steps, "out": str(out)},
            torch_config=config,
            scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
            run_config=RunConfig(storage_path=tmp, name=f"bench-{kind}"),
        )
        called = time.time()
        trainer.fit()
        wall = time.time() - called
        t = json.loads(out.read_text())
    return {"fit_s": wall, "first_step_s": t["first"] - called, "steps_per_s": (steps - 1) / (t["end"] - t["first"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="one run of each config, 20 steps, no warm-up fit")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.steps = 1, 20
    import ray

    samples: dict[str, list[dict[str, float]]] = {"stock": [], "ray-accel": []}
    try:
        ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
        sigterm_as_interrupt()  # ray.init made SIGTERM a bare sys.exit
        if not args.quick:  # --quick keeps the code path, not the figures: no warm-up
            run("stock", 10)  # warm-up: imports, worker processes
        for i in range(args.runs):
            for kind in ("stock", "ray-accel"):
                samples[kind].append(run(kind, args.steps))
                say(f"run {i + 1}/{args.runs}: {kind} done")
    finally:
        with shielded():
            ray.shutdown()
    med = {k: {m: statistics.median(s[m] for s in v) for m in v[0]} for k, v in samples.items()}
    ratios = {m: med["ray-accel"][m] / med["stock"][m] for m in med["stock"]}
    if args.json:
        print(json.dumps({"runs": args.runs, "steps": args.steps, "median": med, "ratio_vs_stock": ratios}, indent=2))
        return
    from ray_accel.cli.render import render

    print(f"2 workers, gloo, {args.steps} steps; medians of {args.runs} runs; baseline: Ray's TorchConfig")
    print(
        render(
            ["CONFIG", "FIT WALL", "TIME TO FIRST STEP", "STEPS/S"],
            [
                [k, f"{v['fit_s']:.2f} s", f"{v['first_step_s']:.2f} s", f"{v['steps_per_s']:.0f}"]
                for k, v in med.items()
            ],
        )
    )
    print(
        "ray-accel / stock: "
        + ", ".join(f"{m} {r:.2f}x" for m, r in ratios.items())
        + " (time ratios > 1 are slower; steps/s > 1 is faster)"
    )


if __name__ == "__main__":
    run_main(main)
