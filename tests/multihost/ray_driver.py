"""Driver for the two-host self-test, run inside host A's namespace.

argv: GCS address, host B's IP. Waits for two alive nodes, runs one task pinned
to B's node (NodeAffinitySchedulingStrategy, soft=False) and prints one JSON line:
{"alive": {ip: node_id}, "driver_ip": ..., "task": [ip, hostname, node_id]}.
"""

from __future__ import annotations

import json
import socket
import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@ray.remote(num_cpus=1)  # type: ignore[untyped-decorator]
def where() -> list[str]:
    return [ray.util.get_node_ip_address(), socket.gethostname(), ray.get_runtime_context().get_node_id()]


def main(address: str, b_ip: str) -> None:
    # The head is preferred as the local node (see tests.multihost.hosts), so a
    # driver in host A needs no _node_ip_address.
    ray.init(address=address, logging_level="ERROR")
    deadline = time.monotonic() + 120
    alive: dict[str, str] = {}
    while time.monotonic() < deadline:
        alive = {n["NodeManagerAddress"]: n["NodeID"] for n in ray.nodes() if n["Alive"]}
        if b_ip in alive:
            break
        time.sleep(0.5)
    if b_ip not in alive:
        sys.exit(f"host B ({b_ip}) never joined; alive nodes: {sorted(alive)}")
    pinned = where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(alive[b_ip], soft=False))
    task = ray.get(pinned.remote(), timeout=120)
    print(json.dumps({"alive": alive, "driver_ip": ray.util.get_node_ip_address(), "task": task}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
