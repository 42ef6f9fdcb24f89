"""`ray-accel`: the command line. Exit 2 for bad input, 1 for run-time failure."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ray_accel.devices import Device
from ray_accel.errors import InputError, RayAccelError
from ray_accel.inventory import discover
from ray_accel.partition import plan_partitions
from ray_accel.table import gib, render
from ray_accel.visibility import format_visible_ids

Handler = Callable[[argparse.Namespace], int]


def _emit(args: argparse.Namespace, payload: dict[str, Any], text: Callable[[], str]) -> int:
    print(json.dumps(payload, indent=2) if args.json else text())
    return 0


def cmd_devices(args: argparse.Namespace) -> int:
    inv = discover(args.backend)
    payload = inv.to_json()

    def text() -> str:
        node = payload["node"]
        lines = [
            f"node {node['hostname']}: {node.get('accelerator_type') or 'no accelerators'}"
            + (f" ({node['instance_type']})" if node.get("instance_type") else "")
        ]
        rows = []
        for name, d in inv.devices():
            rows.append(
                [
                    d.id,
                    name,
                    d.model,
                    ",".join(map(str, d.core_ids)),
                    gib(d.memory_bytes),
                    d.numa_node,
                    ",".join(d.peers) or "-",
                ]
            )
        if rows:
            lines.append(render(["DEVICE", "BACKEND", "MODEL", "CORES", "MEMORY", "NUMA", "PEERS"], rows))
        lines.append("")
        lines.append(
            render(
                ["BACKEND", "ACTIVE", "REASON"],
                [[s.name, "yes" if s.active else "no", s.reason or ""] for s in inv.statuses],
            )
        )
        return "\n".join(lines)

    return _emit(args, payload, text)


def _primary_devices(backend: str | None) -> list[Device]:
    plugin = discover(backend).primary
    if plugin is None:
        raise RayAccelError("no active accelerator backend on this node (see `ray-accel devices`)")
    return list(plugin.list_devices())


def cmd_plan(args: argparse.Namespace) -> int:
    plan = plan_partitions(_primary_devices(args.backend), args.mode, args.agents, args.manual)
    payload = plan.to_json()

    def text() -> str:
        rows = [
            [
                p.agent_id,
                format_id_list(p.device_ids),
                format_visible_ids(p.core_ids, "ranges"),
                p.visible_ids,
                q.describe(),
            ]
            for p, q in zip(plan.partitions, plan.quality, strict=True)
        ]
        lines = [
            f"mode {plan.mode.value}: {len(plan)} partition(s)",
            render(["AGENT", "DEVICES", "CORES", "VISIBLE", "QUALITY"], rows),
        ]
        if plan.unassigned:
            lines.append(f"unassigned: {', '.join(plan.unassigned)}")
        lines += [f"warning: {w}" for w in plan.warnings]
        return "\n".join(lines)

    return _emit(args, payload, text)


def format_id_list(ids: Sequence[str]) -> str:
    """`neuron:0..neuron:3` for a run of Neuron ids, else the ids themselves."""
    if ids and all(i.startswith("neuron:") for i in ids):
        return "neuron:" + format_visible_ids([int(i.removeprefix("neuron:")) for i in ids], "ranges")
    return ",".join(ids)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ray-accel", description="Accelerator partitions for Ray.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("devices", help="list the accelerators of this node")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--backend", help="only this backend (cuda, neuron, mock, ...)")
    p.set_defaults(handler=cmd_devices)

    p = sub.add_parser("plan", help="show how the node would be split between raylets")
    p.add_argument("--mode", default="auto-split", help="shared, auto-split or manual (default auto-split)")
    p.add_argument("--agents", type=int, help="number of partitions (raylets)")
    p.add_argument("--manual", metavar="SPEC", help="devices per agent, e.g. 'a=0-3;b=4-7' (indexes, ranges or ids)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--backend", help="plan for this backend's devices")
    p.set_defaults(handler=cmd_plan)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except InputError as e:
        print(f"ray-accel: error: {e}", file=sys.stderr)
        return 2
    except RayAccelError as e:
        print(f"ray-accel: failed: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
