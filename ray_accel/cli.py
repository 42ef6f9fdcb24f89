"""`ray-accel`: the command line. Exit 2 for bad input, 1 for run-time failure."""

from __future__ import annotations

import argparse
import json
import sys
import time
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
    return list(discover(backend).require_primary().list_devices())


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


def _progress(args: argparse.Namespace) -> Callable[[str], None]:
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[ray-accel {time.monotonic() - started:5.1f}s] {message}", file=sys.stderr, flush=True)

    return say


def cmd_start(args: argparse.Namespace) -> int:
    from ray_accel import launcher

    if args.recover:
        record = launcher.recover(_progress(args), args.timeout)
    else:
        req = launcher.StartRequest(
            head=args.head,
            address=args.address,
            mode=args.mode,
            agents=args.agents,
            manual=args.manual,
            port=args.port,
            port_base=args.port_base,
            ray_args=[a for a in args.ray_args if a != "--"],
            backend=args.backend,
            timeout_s=args.timeout,
            metrics=not args.no_metrics,
        )
        record = launcher.start(req, _progress(args))
    payload = launcher.status()

    def text() -> str:
        env = " ".join(f"{k}={v}" for k, v in payload["env"].items())
        return (
            _status_text(payload)
            + f"\ncluster address: {record['gcs_address']}"
            + f"\ndriver environment: export {env}"
            + f"\nconnect a driver: python -c \"import ray; ray.init(address='{record['gcs_address']}')\""
            + "\ntarget a partition: .options(label_selector={'ray-accel.io/partition': '<agent>'})"
        )

    return _emit(args, payload, text)


def _status_text(payload: dict[str, Any]) -> str:
    if not payload["partitions"]:
        return "no ray-accel partitions recorded on this node"
    rows = [
        [
            p["agent_id"] + (" (head)" if p["head"] else ""),
            "alive" if p["alive"] else "DEAD",
            p["pid"],
            (p["node_id"] or "-")[:12],
            format_visible_ids(p["core_ids"], "ranges"),
            ", ".join(f"{k} {v:g}/{p['total'][k]:g}" for k, v in p["in_use"].items()) or "-",
        ]
        for p in payload["partitions"]
    ]
    return render(["PARTITION", "STATE", "RAYLET PID", "NODE", "CORES", "IN USE"], rows)


def cmd_status(args: argparse.Namespace) -> int:
    from ray_accel import launcher

    payload = launcher.status()
    return _emit(args, payload, lambda: _status_text(payload))


def cmd_stop(args: argparse.Namespace) -> int:
    from ray_accel import launcher

    payload = launcher.stop(args.grace)
    return _emit(
        args,
        payload,
        lambda: payload.get("message") or f"stopped {', '.join(payload['stopped'])} ({len(payload['pids'])} processes)",
    )


def top_payload(status: dict[str, Any], snaps: dict[str, Any]) -> dict[str, Any]:
    devices: list[dict[str, Any]] = []
    workloads: list[dict[str, Any]] = []
    errors: list[str] = []
    for agent, snap in snaps.items():
        if isinstance(snap, str):
            errors.append(f"{agent}: {snap}")
            continue
        for d in snap.get("devices", []):
            devices.append(
                {
                    "id": d["id"],
                    "partition": d["partition"],
                    "family": d["family"],
                    "accelerator_type": d["accelerator_type"],
                    "utilization": d["utilization"],
                    "memory_used_bytes": d["memory_used_bytes"],
                    "memory_total_bytes": d["memory_total_bytes"],
                    "healthy": d["healthy"],
                    "reason": d["reason"],
                }
            )
        workloads += snap.get("workloads", [])
        errors += [f"{agent}: {e}" for e in snap.get("errors", [])]
    return {"partitions": status["partitions"], "devices": devices, "workloads": workloads, "errors": errors}


def _top_text(payload: dict[str, Any]) -> str:
    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.0%}"

    parts = _status_text(payload)
    devs = render(
        ["DEVICE", "PARTITION", "UTIL", "MEMORY", "HEALTH"],
        [
            [
                d["id"],
                d["partition"],
                pct(d["utilization"]),
                f"{gib(d['memory_used_bytes'])} / {gib(d['memory_total_bytes'])}",
                "ok"
                if d["healthy"]
                else ("?" if d["healthy"] is None else "BAD") + (f" ({d['reason']})" if d["reason"] else ""),
            ]
            for d in payload["devices"]
        ],
    )
    work = render(
        ["WORKLOAD", "PARTITION", "PIDS", "CPU S", "RSS", "DEVICE MEMORY"],
        [
            [
                w["workload"],
                w["partition"],
                len(w["pids"]),
                f"{w['cpu_seconds']:.1f}",
                f"{w['rss_bytes'] / 1024**2:.0f} MiB",
                ", ".join(f"{k} {v / 1024**2:.0f} MiB" for k, v in w["device_memory_bytes"].items()) or "-",
            ]
            for w in payload["workloads"]
        ],
    )
    errors = "\n".join(f"error: {e}" for e in payload["errors"])
    return "\n\n".join(x for x in (parts, devs, work, errors) if x)


def cmd_top(args: argparse.Namespace) -> int:
    from ray_accel import auth, exporter, launcher

    status = launcher.status()
    if not status["partitions"]:
        raise RayAccelError("no ray-accel partitions recorded on this node (start them with `ray-accel start`)")
    auth.apply(auth.Auth.from_json(status["auth"]))
    exporter.connect(status["gcs_address"])
    while True:
        payload = top_payload(status, exporter.snapshots([p["agent_id"] for p in status["partitions"]]))
        if args.json:
            print(json.dumps(payload, indent=2))
        else:
            if not args.once:
                print("\033[2J\033[H", end="")
            print(_top_text(payload), flush=True)
        if args.once:
            return 0
        time.sleep(args.interval)
        status = launcher.status()


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

    p = sub.add_parser(
        "start",
        help="start one raylet per partition",
        description="Start one raylet per partition. Options ray-accel does not know go to every `ray start`.",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--head", action="store_true", help="start a new cluster; the first partition is its head")
    where.add_argument("--address", help="join the cluster at ADDR")
    where.add_argument("--recover", action="store_true", help="restart dead partitions with their recorded masks")
    p.add_argument("--mode", default="auto-split", help="shared, auto-split or manual (default auto-split)")
    p.add_argument("--agents", type=int, help="number of partitions (default 1)")
    p.add_argument("--manual", metavar="SPEC", help="devices per agent, e.g. 'a=0-3;b=4-7'")
    p.add_argument("--port", type=int, help="GCS port of the head (default 6379)")
    p.add_argument("--port-base", type=int, help="first port of the partitions' port blocks (default: first free)")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the raylets (default 180)")
    p.add_argument("--backend", help="partition this backend's devices")
    p.add_argument("--no-metrics", action="store_true", help="do not start the per-partition metrics agents")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_start, ray_args=[])

    p = sub.add_parser("status", help="show this node's partitions")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_status)

    p = sub.add_parser("top", help="live view of partitions, devices and workloads")
    p.add_argument("--once", action="store_true", help="print one view and exit")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (default 2)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_top)

    p = sub.add_parser("stop", help="stop the raylets ray-accel started, by PID")
    p.add_argument("--grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL (default 5)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_stop)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        if args.command != "start":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.ray_args = extra
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
