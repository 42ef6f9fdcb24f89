"""What the decider needs a Ray driver for, each run in a short-lived process
of its own: `ray.init` puts its own SIGTERM handler in the process that calls
it (Ray 2.60 `ray._private.worker.init`), and the decider must keep its own
(SIGTERM undoes a restart half done). Two operations:

- `exporters`: (re)start the metrics exporters of some partitions
  (`ray_accel.metrics.export.deploy`).
- `leave`: the exporters of drained raylets exit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence

from ray_accel.core.errors import RayAccelError
from ray_accel.metrics.export import connect, deploy, entries_from_json, kill

TIMEOUT_S = 180.0


def _leave(address: str, node_ids: Sequence[str]) -> None:
    """The metrics exporters of raylets `node_ids` exit, so that those raylets,
    drained by a repartition, end once their work has moved."""
    import ray

    connect(address)
    try:
        for node_id in node_ids:
            kill(node_id)
    finally:
        ray.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ray_accel.health.driver_ops")
    parser.add_argument("op", choices=["exporters", "leave"])
    parser.add_argument("--address", required=True)
    parser.add_argument("--node-id", action="append", help="leave: each drained raylet's")
    parser.add_argument("--entries", help="exporters: JSON list of partition entries")
    parser.add_argument("--host-level")
    parser.add_argument("--state-dir")
    args = parser.parse_args(argv)
    if args.op == "leave":
        _leave(args.address, args.node_id)
    else:
        entries = entries_from_json(args.entries)
        deploy(args.address, entries, host_level_partition=args.host_level, state_dir=args.state_dir)
    print(json.dumps({"ok": True}), flush=True)
    return 0


def run(op: str, args: Sequence[str], env: Mapping[str, str], timeout_s: float = TIMEOUT_S) -> None:
    """Run one operation in a process of its own; `RayAccelError` with the
    tail of its output when it fails or runs past `timeout_s`."""
    cmd = [sys.executable, "-m", "ray_accel.health.driver_ops", op, *args]
    try:
        proc = subprocess.run(
            cmd, env=dict(env), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        raise RayAccelError(f"ray driver for {op} ran past {timeout_s:g}s") from None
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise RayAccelError(f"ray driver for {op} failed ({proc.returncode}): {tail}")


if __name__ == "__main__":
    sys.exit(main())
