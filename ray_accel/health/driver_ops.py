"""What the decider needs a Ray driver for, each run in a short-lived process
of its own: `ray.init` puts its own SIGTERM handler in the process that calls
it (Ray 2.60 `ray._private.worker.init`), and the decider must keep its own
(SIGTERM undoes a restart half done). Two operations:

- `keep`: a keeper actor on the head partition's raylet (0 CPUs, pinned to
  its node id, detached), so the head, once drained, is never idle: Ray ends
  an idle drained raylet, and the head's cannot be restarted. A live actor
  keeps a raylet from counting as idle whatever resources it holds (seen on
  Ray 2.60: a drained raylet holding a 0-CPU detached actor stays draining;
  one with nothing exits).
- `exporters`: (re)start the metrics exporters of some partitions
  (`ray_accel.metrics.export.deploy`).
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from collections.abc import Mapping, Sequence

from ray_accel.core.errors import RayAccelError
from ray_accel.metrics.export import NAMESPACE, ExporterEntry, entries_from_json

TIMEOUT_S = 180.0


def keeper_name(node_id: str) -> str:
    return f"keeper-{node_id}"


class Keeper:
    """Does nothing: while it lives, its raylet is not idle."""

    def ping(self) -> int:
        return 1


def _keep(address: str, node_id: str) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.WARNING)
    try:
        name = keeper_name(node_id)
        try:
            handle = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            handle = (
                ray.remote(num_cpus=0, max_restarts=0)(Keeper)
                .options(
                    name=name,
                    namespace=NAMESPACE,
                    lifetime="detached",
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                )
                .remote()
            )
        ray.get(handle.ping.remote(), timeout=120)
    finally:
        ray.shutdown()


def _exporters(address: str, entries: Sequence[ExporterEntry], host_level: str | None, state_dir: str) -> None:
    from ray_accel.metrics import export

    export.deploy(address, entries, host_level_partition=host_level, state_dir=state_dir)


def _leave(address: str, node_ids: Sequence[str]) -> None:
    """The metrics exporters of raylets `node_ids` exit, so that those raylets,
    drained by a repartition, end once their work has moved."""
    import ray

    from ray_accel.metrics import export

    export.connect(address)
    try:
        for node_id in node_ids:
            try:
                ray.kill(ray.get_actor(export.actor_name(node_id), namespace=NAMESPACE))
            except ValueError:
                pass  # none runs there
    finally:
        ray.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ray_accel.health.driver_ops")
    sub = parser.add_subparsers(dest="op", required=True)
    keep = sub.add_parser("keep")
    keep.add_argument("--address", required=True)
    keep.add_argument("--node-id", required=True)
    exp = sub.add_parser("exporters")
    exp.add_argument("--address", required=True)
    exp.add_argument("--entries", required=True, help="JSON list of partition entries")
    exp.add_argument("--host-level")
    exp.add_argument("--state-dir", required=True)
    leave = sub.add_parser("leave")
    leave.add_argument("--address", required=True)
    leave.add_argument("--node-id", action="append", required=True)
    args = parser.parse_args(argv)
    if args.op == "keep":
        _keep(args.address, args.node_id)
    elif args.op == "leave":
        _leave(args.address, args.node_id)
    else:
        _exporters(args.address, entries_from_json(args.entries), args.host_level, args.state_dir)
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
