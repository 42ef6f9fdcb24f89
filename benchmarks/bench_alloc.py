"""Question: under churn, how often does a multi-core request get an aligned,
contiguous core group, with our allocator against lowest-free-first (what
Ray's raylet does: it hands out the lowest free slot indexes)?

A seeded trace of 1/2/4/8-core requests arrives and leaves on trn1.32xlarge
(32 cores) and trn2.48xlarge (64 logical cores). For every multi-core grant we
record whether an aligned contiguous free group existed at that moment and
whether the grant got one. Also operations per second. Medians over seeds.

    python benchmarks/bench_alloc.py [--steps N] [--seeds K] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from ray_accel_mock.spec import load_spec

from ray_accel.cli.render import render
from ray_accel.partition.allocmap import AllocationError, AllocState, allocate, new_state, release

Picker = Callable[[AllocState, str, int], tuple[AllocState, tuple[int, ...]]]


def ours(state: AllocState, wid: str, n: int) -> tuple[AllocState, tuple[int, ...]]:
    state, alloc = allocate(state, wid, n)
    return state, alloc.units


def lowest_free_first(state: AllocState, wid: str, n: int) -> tuple[AllocState, tuple[int, ...]]:
    free = state.free_units()
    if len(free) < n:
        raise AllocationError("full")
    state, alloc = allocate(state, wid, units=free[:n])
    return state, alloc.units


def aligned_group_free(state: AllocState, n: int) -> bool:
    free = set(state.free_units())
    return any(all(u in free for u in range(s, s + n)) for s in state.units if s % n == 0)


def is_aligned(units: tuple[int, ...]) -> bool:
    n = len(units)
    return units[0] % n == 0 and list(units) == list(range(units[0], units[0] + n))


@dataclass
class Result:
    multi: int = 0
    free_existed: int = 0
    got_when_free: int = 0
    aligned: int = 0
    rejected: int = 0
    ops: int = 0
    seconds: float = 0.0


def run(preset: str, picker: Picker, seed: int, steps: int) -> Result:
    rng = random.Random(seed)
    units = [c for d in load_spec(preset).devices for c in d.core_ids]
    state = new_state(units)
    live: list[tuple[int, str]] = []  # (leave at step, workload id)
    r = Result()
    start = time.perf_counter()
    for step in range(steps):
        for item in [x for x in live if x[0] <= step]:
            state = release(state, item[1])
            live.remove(item)
            r.ops += 1
        n = rng.choices([1, 2, 4, 8], weights=[4, 3, 2, 1])[0]
        wid = f"w{step}"
        existed = n > 1 and aligned_group_free(state, n)
        try:
            state, got = picker(state, wid, n)
        except AllocationError:
            r.rejected += 1
            continue
        r.ops += 1
        live.append((step + rng.randint(1, 40), wid))
        if n > 1:
            r.multi += 1
            r.aligned += is_aligned(got)
            if existed:
                r.free_existed += 1
                r.got_when_free += is_aligned(got)
    r.seconds = time.perf_counter() - start
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for preset in ("trn1.32xlarge", "trn2.48xlarge"):
        for name, picker in (("ray-accel", ours), ("lowest-free-first", lowest_free_first)):
            results = [run(preset, picker, seed, args.steps) for seed in range(args.seeds)]
            rows.append(
                {
                    "node": preset,
                    "allocator": name,
                    "multi_core_grants": statistics.median(r.multi for r in results),
                    "aligned_when_free": statistics.median(r.got_when_free / max(1, r.free_existed) for r in results),
                    "aligned_overall": statistics.median(r.aligned / max(1, r.multi) for r in results),
                    "rejected": statistics.median(r.rejected for r in results),
                    "ops_per_s": statistics.median(r.ops / r.seconds for r in results),
                }
            )
    ratios = []
    for preset in ("trn1.32xlarge", "trn2.48xlarge"):
        a, b = (r for r in rows if r["node"] == preset)
        ratios.append(
            {
                "node": preset,
                "aligned_overall_ratio": a["aligned_overall"] / max(1e-9, b["aligned_overall"]),
                "ops_per_s_ratio": a["ops_per_s"] / b["ops_per_s"],
            }
        )
    if args.json:
        print(json.dumps({"steps": args.steps, "seeds": args.seeds, "rows": rows, "ratios": ratios}, indent=2))
        return
    print(f"churn trace: {args.steps} steps, medians over {args.seeds} seeds; baseline: lowest-free-first")
    print(
        render(
            ["NODE", "ALLOCATOR", "MULTI-CORE GRANTS", "ALIGNED WHEN FREE", "ALIGNED OVERALL", "REJECTED", "OPS/S"],
            [
                [
                    r["node"],
                    r["allocator"],
                    r["multi_core_grants"],
                    f"{r['aligned_when_free']:.1%}",
                    f"{r['aligned_overall']:.1%}",
                    r["rejected"],
                    f"{r['ops_per_s']:,.0f}",
                ]
                for r in rows
            ],
        )
    )
    for x in ratios:
        print(
            f"{x['node']}: aligned grants {x['aligned_overall_ratio']:.2f}x the baseline, "
            f"speed {x['ops_per_s_ratio']:.2f}x the baseline"
        )


if __name__ == "__main__":
    main()
