"""Question: how long does Neuron discovery take through our sysfs path,
against Ray 2.60's own `NeuronAcceleratorManager` path?

Ray runs `/opt/aws/neuron/bin/neuron-ls --json-output` and sums `nc_count`.
Here that path is redirected to a stub that only `cat`s the same inventory
JSON (a real neuron-ls also talks to the driver, so Ray's real cost is
higher: the ratio is conservative). Our rows build the full inventory (ids,
cores, topology, type), not just a count. Medians of many runs, the three
paths interleaved (one call of each in turn), so a change in the machine's
load weighs on each alike.

    python benchmarks/bench_discovery.py [--preset trn1.32xlarge] [--runs 200] [--quick] [--json]

`--quick`: 10 runs of each path (for CI: it keeps the code path working).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ray_accel_neuron import NeuronPlugin

from benchmarks.harness import run_main
from ray_accel.cli.render import render
from tests.fakes.neuron_ls_stub import inventory
from tests.fakes.neuron_sysfs import build_tree

RAY_NEURON_DIR = "/opt/aws/neuron/bin/"


def timed(fns: Sequence[Callable[[], Any]], runs: int) -> list[tuple[float, Any]]:
    """The median time of each of `fns` and its result, the calls interleaved
    (one of each in turn, `runs` times): a machine whose load changes during
    the run weighs on every path alike."""
    results = [fn() for fn in fns]  # warm caches, imports
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            results[i] = fn()
            samples[i].append(time.perf_counter() - start)
    return [(statistics.median(s), r) for s, r in zip(samples, results, strict=True)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="trn1.32xlarge")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="10 runs of each path")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.runs = 10

    with tempfile.TemporaryDirectory() as tmp:
        tree = build_tree(Path(tmp) / "host", args.preset, core_metrics=False)
        # No neuron-ls on this path: sysfs, /dev and PCI reads only (a multi-NUMA
        # host then warns that NUMA is unknown; with neuron-ls it would run it).
        sysfs_env = {
            "RAYACCEL_NEURON_SYSFS_ROOT": str(tree.neuron_root),
            "RAYACCEL_NEURON_DEV_ROOT": str(tree.dev_root),
            "PATH": "/usr/bin:/bin",
        }
        data = Path(tmp) / "inventory.json"
        data.write_text(json.dumps(inventory(args.preset, "ok")))
        stub = Path(tmp) / "neuron-ls"
        stub.write_text(f"#!/bin/sh\ncat {data}\n")
        stub.chmod(0o755)

        def ours_sysfs() -> int:
            p = NeuronPlugin(sysfs_env)
            assert p.probe() is None
            return p.host_info().core_count

        def ours_neuron_ls() -> int:
            p = NeuronPlugin(
                {
                    "RAYACCEL_SYS_ROOT": str(Path(tmp) / "none"),
                    "RAYACCEL_NEURON_DEV_ROOT": str(Path(tmp) / "none"),
                    "RAYACCEL_NEURON_LS": str(stub),
                }
            )
            assert p.probe() is None
            return p.host_info().core_count

        from ray._private.accelerators.neuron import NeuronAcceleratorManager

        real_run = subprocess.run
        real_isdir = os.path.isdir

        def redirected_run(cmd: Any, *a: Any, **k: Any) -> Any:
            if isinstance(cmd, list) and cmd and cmd[0] == os.path.join(RAY_NEURON_DIR, "neuron-ls"):
                cmd = [str(stub), *cmd[1:]]
            return real_run(cmd, *a, **k)

        def ray_path() -> int:
            with (
                mock.patch("subprocess.run", redirected_run),
                mock.patch("os.path.isdir", lambda p: p == RAY_NEURON_DIR or real_isdir(p)),
            ):
                return int(NeuronAcceleratorManager.get_current_node_num_accelerators())

        paths = (
            ("ray-accel sysfs", ours_sysfs, "full inventory"),
            ("ray-accel neuron-ls (stub)", ours_neuron_ls, "full inventory"),
            ("Ray 2.60 NeuronAcceleratorManager (stub)", ray_path, "core count only"),
        )
        measured = timed([fn for _, fn, _ in paths], args.runs)
        rows = [
            {"path": name, "median_ms": median * 1000, "cores": cores, "returns": what}
            for (name, _, what), (median, cores) in zip(paths, measured, strict=True)
        ]

    base = rows[2]["median_ms"]
    for r in rows:
        r["speedup_vs_ray"] = base / r["median_ms"]
    if args.json:
        print(
            json.dumps({"preset": args.preset, "runs": args.runs, "baseline": rows[2]["path"], "rows": rows}, indent=2)
        )
        return
    print(f"Neuron discovery on a fake {args.preset}, median of {args.runs} runs; baseline: Ray 2.60's path")
    print(
        render(
            ["PATH", "MEDIAN", "CORES", "RETURNS", "VS RAY"],
            [
                [r["path"], f"{r['median_ms']:.3f} ms", r["cores"], r["returns"], f"{r['speedup_vs_ray']:.1f}x"]
                for r in rows
            ],
        )
    )


if __name__ == "__main__":
    run_main(main)
