"""`make demo`: discover this node's accelerators (or the mock trn1.32xlarge),
plan a two-way split and show it. Training in each partition comes with the
training backend."""

from __future__ import annotations

import os
import sys

from ray_accel.inventory import discover
from ray_accel.partition import plan_partitions
from ray_accel.table import gib, render
from ray_accel.visibility import format_visible_ids


def main() -> int:
    inv = discover()
    if inv.primary is None and "RAYACCEL_MOCK" not in os.environ:
        print("no accelerator found on this machine: using the mock trn1.32xlarge")
        os.environ["RAYACCEL_MOCK"] = "trn1.32xlarge"
        inv = discover()
    plugin = inv.primary
    if plugin is None:
        print("no active backend", file=sys.stderr)
        return 1
    info = plugin.node_info()
    print(
        f"\nnode: {info.accelerator_type} x {info.device_count} devices, "
        f"{info.core_count} {info.resource_name} (backend {plugin.name})"
    )
    rows = [
        [d.id, d.model, format_visible_ids(d.core_ids, "ranges"), gib(d.memory_bytes), d.numa_node, len(d.peers)]
        for d in plugin.list_devices()
    ]
    print(render(["DEVICE", "MODEL", "CORES", "MEMORY", "NUMA", "PEERS"], rows))
    plan = plan_partitions(plugin.list_devices(), "auto-split", 2)
    print("\nplanned 2-way split:")
    print(
        render(
            ["AGENT", "CORES", "QUALITY"],
            [
                [p.agent_id, format_visible_ids(p.core_ids, "ranges"), q.describe()]
                for p, q in zip(plan, plan.quality, strict=True)
            ],
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
