"""Training loops for the jobs tests, imported by the training workers.

Each worker writes what it sees at start (ranks as ray-accel and Ray report
them, its mask, its pid) to OUT/ws<world size>/rank<r>.json, may wait for a
file (so the driver can act while the job runs), then trains a few steps
with `examples.train_partitions.train_loop` (which writes OUT/final/rank<r>.json).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

ENV_SEEN = ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "WORLD_SIZE", "NEURON_RT_VISIBLE_CORES")


def report_start(out: Path) -> dict[str, Any]:
    from examples.train_partitions import rank_report
    from ray_accel.train import get_context

    ctx = get_context()
    report = {
        **rank_report(ctx, ENV_SEEN),
        "own_ids": list(ctx.own_ids),
        "pid": os.getpid(),
    }
    d = out / f"ws{ctx.world_size}"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"rank{ctx.world_rank}.json").write_text(json.dumps(report))
    return report


def wait_then_train(config: dict[str, Any]) -> None:
    """config: out; wait_for (a file); wait_below (wait only while the world
    is smaller than this; default: always); skip_if (a file that, present at
    start, means no wait: a restarted attempt); max_wait_s; steps."""
    from examples.train_partitions import train_loop

    out = Path(config["out"])
    me = report_start(out)
    skip = config.get("skip_if")
    must_wait = me["world_size"] < config.get("wait_below", 1 << 30) and not (skip and Path(skip).exists())
    if must_wait and config.get("wait_for"):
        deadline = time.time() + float(config.get("max_wait_s", 150))
        while not Path(config["wait_for"]).exists() and time.time() < deadline:
            time.sleep(0.2)
    train_loop({"steps": int(config.get("steps", 3)), "out": str(out / "final")})
