"""Question: what does an active check cost beside its own work, how close to
its time limit does a check that hangs end, and what does a repair cost?

All on the mock (no hardware), each figure the median of --runs calls after
one untimed call, in wall seconds (the calls start processes):

- baseline: a bare interpreter started and waited for (`python -c pass`), in
  this run, on this machine: the floor of any check child;
- the mock's check of one device (`MockPlugin.check`, `delay_s` 0): a check
  child started through the runner, one device visible, its result read;
  the ratio to the baseline is the runner's and the child's own cost;
- the import cost of the families' check children where they cannot run
  (`python -m ray_accel_cuda.check` and `ray_accel_neuron.check` on a
  machine without CUDA or Neuron: each imports torch and says
  `unavailable`): what a check costs before it touches a device;
- a check cut by its limit (`delay_s` 30, limit --limit seconds): how long
  after the limit the runner returns `timeout` with the child killed;
- the mock GPU repair (recovery action GPU_RESET in the fault file): the
  plan, the fault file read twice and one line appended to repairs.jsonl
  (removed before each call: an ok reset clears the action, as the driver
  does, so the GPU asks again only without its record).

    python benchmarks/bench_checks.py [--runs 5] [--limit 1.0] [--quick] [--json]

`--quick`: 2 runs of each, the same measurements.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ray_accel_mock import MockPlugin
from ray_accel_mock.faults import FAULTS_ENV, REPAIRS_FILE
from ray_accel_mock.spec import load_spec

from benchmarks.harness import run_main, timed
from ray_accel.core.checks import CheckResult, RepairResult, parse_child_output
from ray_accel.plugins.check_runner import child_command


def bare() -> int:
    return subprocess.run([sys.executable, "-c", "pass"], check=True).returncode


def family_child(module: str) -> str:
    done = subprocess.run(child_command(module, *(["GPU-none"] if "cuda" in module else [])), capture_output=True)
    return parse_child_output(done.stdout.decode(errors="replace"))[0].value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--limit", type=float, default=1.0, help="the time limit of the check that hangs (s)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs = 2 if args.quick else args.runs
    rows: list[tuple[str, float, str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-checks-") as tmp:
        faults = Path(tmp) / "faults.json"
        faults.write_text(json.dumps({"checks": {"neuron:3": {"outcome": "passed", "delay_s": 30}}}))
        os.environ[FAULTS_ENV] = str(faults)
        neuron = MockPlugin(load_spec("trn1.32xlarge"))
        base, _ = timed(bare, runs)
        rows.append(("bare interpreter (baseline)", base, ""))
        seconds, result = timed(lambda: neuron.check("neuron:0", 60), runs)
        rows.append(("mock check, one device", seconds, _outcome(result)))
        for module in ("ray_accel_cuda.check", "ray_accel_neuron.check"):
            seconds, said = timed(functools.partial(family_child, module), runs)
            rows.append((f"{module} where it cannot run", seconds, said))
        seconds, result = timed(lambda: neuron.check("neuron:3", args.limit), runs)
        rows.append((f"check cut at {args.limit:g} s (delay 30 s)", seconds, _outcome(result)))
        gpu_faults = {"events": [{"device": "", "kind": "recovery", "code": "GPU_RESET"}]}
        gpu = MockPlugin(load_spec("p4d.24xlarge"))
        first = gpu.list_devices()[0].id
        gpu_faults["events"][0]["device"] = first
        faults.write_text(json.dumps(gpu_faults))
        log = Path(tmp) / REPAIRS_FILE

        def reset_again() -> RepairResult:
            # An ok reset clears the action (as the driver does): without its record the GPU asks again.
            log.unlink(missing_ok=True)
            return gpu.repair(first)

        seconds, repaired = timed(reset_again, runs)
        rows.append(("mock GPU repair (GPU_RESET)", seconds, _outcome(repaired)))
        made = len(log.read_text().splitlines())
    if args.json:
        print(json.dumps({"runs": runs, "rows": [{"what": w, "seconds": s, "outcome": o} for w, s, o in rows]}))
        return
    print(f"{'what':<45} {'median s':>9} {'x baseline':>10}  outcome")
    for what, seconds, outcome in rows:
        print(f"{what:<45} {seconds:>9.4f} {seconds / base:>10.2f}  {outcome}")
    print(f"repairs.jsonl lines written by the last repair: {made} (one reset, run once)")


def _outcome(result: CheckResult | RepairResult | Any) -> str:
    return str(getattr(result, "outcome", result).value)


if __name__ == "__main__":
    run_main(main)
