"""Plain-text rendering for the CLI: tables and the views each command prints."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ray_accel.core.visibility import format_visible_ids


def render(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024**3:.0f} GiB"


def format_id_list(ids: Sequence[str]) -> str:
    """`neuron:0-3` for a run of Neuron ids, else the ids themselves."""
    if ids and all(i.startswith("neuron:") and i.removeprefix("neuron:").isdigit() for i in ids):
        return "neuron:" + format_visible_ids([int(i.removeprefix("neuron:")) for i in ids], "ranges")
    return ",".join(ids)


def node_kind(payload: dict[str, Any]) -> str:
    """The node's one accelerator type, or every type of a mixed node."""
    node = payload["node"]
    if node.get("accelerator_type"):
        return str(node["accelerator_type"])
    kinds = list(dict.fromkeys(d.get("accelerator_type") or d["model"] for d in payload["devices"]))
    if not kinds:
        return "no accelerators"
    return kinds[0] if len(kinds) == 1 else f"mixed: {', '.join(kinds)}"


def partition_kind(p: dict[str, Any]) -> str | None:
    """A partition's advertised type; a mixed one names its models."""
    models = p.get("models") or []
    if p.get("accelerator_type"):
        return str(p["accelerator_type"])
    return f"none ({' + '.join(models)})" if len(models) > 1 else None


def devices_text(payload: dict[str, Any]) -> str:
    node = payload["node"]
    lines = [
        f"node {node['hostname']}: {node_kind(payload)}"
        + (f" ({node['instance_type']})" if node.get("instance_type") else "")
    ]
    rows = [
        [
            d["id"],
            d["plugin"],
            d["model"],
            ",".join(map(str, d["core_ids"])),
            gib(d["memory_bytes"]),
            d["numa_node"],
            ",".join(d["peers"]) or "-",
            ",".join(d.get("external_peers", [])) or "-",
        ]
        for d in payload["devices"]
    ]
    if rows:
        lines.append(render(["DEVICE", "BACKEND", "MODEL", "CORES", "MEMORY", "NUMA", "PEERS", "EXTERNAL"], rows))
    for backend in node.get("backends", []):
        lines += [f"warning ({backend['plugin']}): {w}" for w in backend.get("warnings", [])]
    lines.append("")
    lines.append(
        render(
            ["BACKEND", "ACTIVE", "REASON"],
            [[s["name"], "yes" if s["active"] else "no", s["reason"] or ""] for s in payload["plugins"]],
        )
    )
    return "\n".join(lines)


def plan_text(payload: dict[str, Any]) -> str:
    rows = [
        [
            p["partition"],
            format_id_list(p["device_ids"]),
            format_visible_ids(p["core_ids"], "ranges"),
            p["visible_ids"],
            partition_kind(p),
            p["quality"],
        ]
        for p in payload["partitions"]
    ]
    lines = [
        f"mode {payload['mode']}: {len(rows)} partition(s)",
        render(["PARTITION", "DEVICES", "CORES", "VISIBLE", "TYPE", "QUALITY"], rows),
    ]
    if payload["unassigned"]:
        lines.append(f"unassigned: {', '.join(payload['unassigned'])}")
    lines += [f"warning: {w}" for w in payload["warnings"]]
    return "\n".join(lines)


def status_text(payload: dict[str, Any]) -> str:
    if not payload["partitions"]:
        return "no ray-accel partitions recorded on this host"
    rows = [
        [
            p["partition"] + (" (head)" if p["head"] else ""),
            "alive" if p["alive"] else "DEAD",
            p["pid"],
            (p["node_id"] or "-")[:12],
            format_visible_ids(p["core_ids"], "ranges"),
            partition_kind(p),
            ", ".join(f"{k} {v:g}/{p['total'][k]:g}" for k, v in p["in_use"].items()) or "-",
        ]
        for p in payload["partitions"]
    ]
    return render(["PARTITION", "STATE", "RAYLET PID", "NODE", "CORES", "TYPE", "IN USE"], rows)


def started_text(payload: dict[str, Any]) -> str:
    env = " ".join(f"{k}={v}" for k, v in payload["env"].items())
    address = payload["gcs_address"]
    return (
        status_text(payload)
        + f"\ncluster address: {address}"
        + f"\ndriver environment: export {env}"
        + f"\nconnect a driver: python -c \"import ray; ray.init(address='{address}')\""
        + "\ntarget a partition: .options(label_selector={'ray-accel.io/partition': '<partition>'})"
    )


def top_text(payload: dict[str, Any]) -> str:
    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.0%}"

    def health(d: dict[str, Any]) -> str:
        if d["healthy"]:
            return "ok"
        return ("?" if d["healthy"] is None else "BAD") + (f" ({d['reason']})" if d["reason"] else "")

    devs = render(
        ["DEVICE", "PARTITION", "UTIL", "MEMORY", "HEALTH"],
        [
            [
                d["id"],
                d["partition"],
                pct(d["utilization"]),
                f"{gib(d['memory_used_bytes'])} / {gib(d['memory_total_bytes'])}",
                health(d),
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
    return "\n\n".join(x for x in (status_text(payload), devs, work, errors) if x)
