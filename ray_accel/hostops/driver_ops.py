"""What the decider needs a Ray driver for, each run in a short-lived process
of its own: `ray.init` puts its own SIGTERM handler in the process that calls
it (Ray 2.60 `ray._private.worker.init`), and the decider must keep its own
(SIGTERM undoes a restart half done). Two operations:

- `exporters`: (re)start the metrics exporters of some partitions
  (`ray_accel.metrics.export.deploy`).
- `leave`: the exporters of drained raylets exit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ray_accel.cluster.helpers import read_inputs
from ray_accel.core import reader
from ray_accel.core.errors import RayAccelError
from ray_accel.metrics.export import Deployment, deploy, kill
from ray_accel.metrics.snapshots import connect

TIMEOUT_S = 180.0
MODULE = "ray_accel.hostops.driver_ops"


@dataclass(frozen=True)
class DriverOp:
    """One operation on the cluster at `address`, handed to its process as
    one value: `exporters` starts those `deploy` names, `leave` ends those
    of the raylets `node_ids`."""

    op: Literal["exporters", "leave"]
    address: str
    deploy: Deployment | None = None
    node_ids: tuple[str, ...] = ()


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
    op = read_inputs(DriverOp, argv, MODULE)
    if op.deploy is not None:
        deploy(op.deploy)
    else:
        _leave(op.address, op.node_ids)
    print(json.dumps({"ok": True}), flush=True)
    return 0


def run(op: DriverOp, env: Mapping[str, str], timeout_s: float = TIMEOUT_S) -> None:
    """Run one operation in a process of its own; `RayAccelError` with the
    tail of its output when it fails or runs past `timeout_s`."""
    cmd = [sys.executable, "-m", MODULE, json.dumps(reader.dump(op))]
    try:
        proc = subprocess.run(
            cmd, env=dict(env), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        raise RayAccelError(f"ray driver for {op.op} ran past {timeout_s:g}s") from None
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise RayAccelError(f"ray driver for {op.op} failed ({proc.returncode}): {tail}")


if __name__ == "__main__":
    sys.exit(main())
