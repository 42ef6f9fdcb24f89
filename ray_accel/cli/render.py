"""Plain-text rendering for the CLI: tables and the views each command prints."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ray_accel.core.numa import format_cpulist
from ray_accel.core.visibility import format_visible_ids
from ray_accel.partition.plan import PARTITION_LABEL

if TYPE_CHECKING:  # the status module is imported only by the commands that show it
    from ray_accel.cli.connect import FromExporters
    from ray_accel.cluster.host import Division, Share
    from ray_accel.cluster.status import ClusterPartition, ClusterView, HostStatus
    from ray_accel.metrics.collect import OrphanReading, WorkloadJson
    from ray_accel.partition.plan import Plan
    from ray_accel.plugins.discovery import PluginInventory

T = TypeVar("T")


def render(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def table(items: Iterable[T], *columns: tuple[str, Callable[[T], object]]) -> str:
    """`render` with a row per item: each column its header and what it shows of an item."""
    return render([h for h, _ in columns], [[cell(i) for _, cell in columns] for i in items])


def gib(n: int | None, digits: int = 0) -> str:
    return "-" if n is None else f"{n / 1024**3:.{digits}f} GiB"


def format_id_list(ids: Sequence[str]) -> str:
    """`dev:0-3` for ids that are one prefix and numbers (`dev:0`, `dev:1`, ...),
    else the ids themselves."""
    prefixes = {i.partition(":")[0] for i in ids}
    numbers = [i.partition(":")[2] for i in ids]
    if len(prefixes) == 1 and all(":" in i for i in ids) and all(n.isascii() and n.isdigit() for n in numbers):
        return f"{prefixes.pop()}:" + format_visible_ids([int(n) for n in numbers], "ranges")
    return ",".join(ids)


def partition_kind(accelerator_type: str | None, models: Sequence[str]) -> str | None:
    """A partition's advertised type; a mixed one names its models."""
    return accelerator_type or (f"none ({' + '.join(models)})" if len(models) > 1 else None)


def devices_text(inventory: PluginInventory) -> str:
    """The host (named by its one accelerator type, or every type of a mixed
    host), its devices and every backend's state."""
    infos = [p.host_info() for p in inventory.plugins]
    devices = inventory.devices()
    kinds = list(dict.fromkeys(d.accelerator_type or d.model for _, d in devices))
    kind = (infos and infos[0].accelerator_type) or (
        kinds[0] if len(kinds) == 1 else f"mixed: {', '.join(kinds)}" if kinds else "no accelerators"
    )
    instance = infos and infos[0].instance_type
    lines = [f"host {socket.gethostname()}: {kind}" + (f" ({instance})" if instance else "")]
    rows = [
        [
            d.id,
            name,
            d.model,
            ",".join(map(str, d.core_ids)),
            gib(d.memory_bytes),
            d.numa_node,
            ",".join(d.peers) or "-",
            ",".join(d.external_peers) or "-",
        ]
        for name, d in devices
    ]
    if rows:
        lines.append(render(["DEVICE", "BACKEND", "MODEL", "CORES", "MEMORY", "NUMA", "PEERS", "EXTERNAL"], rows))
    for info in infos:
        lines += [f"warning ({info.plugin}): {w}" for w in info.warnings]
    statuses = [[s.name, "yes" if s.active else "no", s.reason or ""] for s in inventory.statuses]
    lines += ["", render(["BACKEND", "ACTIVE", "REASON"], statuses)]
    return "\n".join(lines)


def cpu_set_text(cpu_set: Sequence[int] | None) -> str:
    return "-" if cpu_set is None else format_cpulist(cpu_set)


def plan_text(plan: Plan, division: Division, head: Share | None = None) -> str:
    rows = [
        [
            p.name,
            format_id_list(p.device_ids),
            format_visible_ids(p.core_ids, "ranges"),
            p.visible_ids,
            partition_kind(p.accelerator_type, p.models),
            share.cpus,
            cpu_set_text(share.cpu_set),
            gib(share.memory, 1),
            gib(share.object_store_memory, 1),
            q.describe(),
        ]
        for p, q, share in zip(plan.partitions, plan.quality, division.shares, strict=True)
    ]
    lines = [f"mode {plan.mode.value}: {len(rows)} partition(s)"]
    if plan.mask:
        lines.append(plan.mask.description)
    headers = ["PARTITION", "DEVICES", "CORES", "VISIBLE", "TYPE", "CPUS", "CPU SET", "MEMORY", "OBJ STORE", "QUALITY"]
    lines.append(render(headers, rows))
    if head is not None:
        lines.append(
            f"head raylet (start --head): {head.cpus} CPUs, {head.memory / 2**20:.0f} MiB memory, "
            f"{head.object_store_memory / 2**20:.0f} MiB object store, taken from the host's figures "
            "before the partitions divide them"
        )
    if division.pinning:
        lines.append(f"CPU pinning: {division.pinning}")
    if plan.unassigned:
        lines.append(f"unassigned: {', '.join(plan.unassigned)}")
    lines += [f"warning: {w}" for w in [*plan.warnings, *division.warnings]]
    return "\n".join(lines)


def status_text(payload: HostStatus) -> str:
    warnings = [f"warning: {w}" for w in payload.warnings]
    if not payload.partitions:
        return "\n".join(["no ray-accel partitions recorded on this host", *warnings])
    shown = table(
        payload.partitions,
        ("PARTITION", lambda p: p.partition),
        ("STATE", lambda p: "alive" if p.alive else "DEAD"),
        ("HEALTH", lambda p: p.health.state.value if p.health else "-"),
        ("RAYLET PID", lambda p: p.pid),
        ("NODE", lambda p: (p.node_id or "-")[:12]),
        ("CORES", lambda p: format_visible_ids(p.core_ids, "ranges") or "-"),
        ("TYPE", lambda p: partition_kind(p.accelerator_type, p.models)),
        ("CPU SET", lambda p: cpu_set_text(p.cpu_set)),
        ("IN USE", lambda p: ", ".join(f"{k} {v:g}/{p.total[k]:g}" for k, v in p.in_use.items()) or "-"),
    )
    extra = [f"CPU pinning: {payload.cpu_pinning}"] if payload.cpu_pinning else []
    if head := payload.head:  # the head raylet: no devices, not a partition
        extra.append(
            f"head: {'alive' if head.alive else 'DEAD'}, raylet pid {head.pid}, node {(head.node_id or '-')[:12]}"
        )
    if payload.host_ip:
        extra.append(f"host: {payload.host}, node IP {payload.host_ip}")
    if payload.inherited_mask:
        extra.append(payload.inherited_mask.description)
    if payload.dashboard_address:
        extra.append(f"dashboard: {payload.dashboard_address}")
    extra += health_lines(payload)
    if change := payload.change:
        if change.running:
            extra.append(f"{change.kind} under way (PID {change.pid}): step {change.step}")
        else:
            extra.append(f"{change.kind} interrupted at step {change.step}: `ray-accel start --recover` finishes it")
        if change.starting:
            extra.append(f"  to start: {', '.join(change.starting)}")
    for spare in payload.unassigned:
        extra.append(f"unassigned: {','.join(spare.device_ids)} ({spare.reason})")
    return "\n".join([shown, *extra, *warnings])


def decider_line(pid: int | None, alive: bool, action: str) -> str:
    running = f"pid {pid}" if alive else "NOT RUNNING (ray-accel start --recover starts it)"
    return f"health decider: {running}, --on-unhealthy {action}"


def health_lines(payload: HostStatus) -> list[str]:
    """`status`: the decider, each partition out of its normal state and
    each device that is not healthy, with its last event."""
    summary = payload.health
    if not summary:
        return []
    lines = [decider_line(summary.decider.pid, summary.decider.alive, summary.action.value)]
    lines += [
        f"  {p.partition} {p.health.state.value}: {p.health.detail}"
        for p in payload.partitions
        if p.health and p.health.detail
    ]
    for d in summary.not_healthy:
        why = f": {d.last_event.reason}" if d.last_event and d.last_event.reason else ""
        lines.append(f"  {d.device_id} {d.state.value}{why}")
    lines += [f"  {c.device_id} last check {c.outcome.value}: {c.detail}" for c in summary.checks]
    lines += [f"  {r.device_id} last repair {r.outcome.value}: {r.detail}" for r in summary.repairs]
    return lines


def started_text(payload: HostStatus) -> str:
    env = " ".join(f"{k}={v}" for k, v in payload.env.items())
    address, dashboard = payload.gcs_address, payload.dashboard_address
    submit = [f"submit a job: ray job submit --address {dashboard} -- python script.py"] if dashboard else []
    lines = [
        status_text(payload),
        f"cluster address: {address}",
        *submit,
        f"driver environment: export {env}",
        f"connect a driver: python -c \"import ray; ray.init(address='{address}')\"",
        f"target a partition: .options(label_selector={{'{PARTITION_LABEL}': '<partition>'}})",
    ]
    return "\n".join(lines)


def orphans_text(orphans: Sequence[OrphanReading], errors: Sequence[str] = ()) -> str:
    """Processes holding a partition's device without being its raylet's workers."""
    lines = []
    if orphans:
        rows = [[o.pid, o.host, o.partition, o.device_id, o.command] for o in orphans]
        lines.append(render(["ORPHAN PID", "HOST", "PARTITION", "DEVICE", "COMMAND"], rows))
    elif not errors:
        lines.append("orphans: none")
    lines += [f"orphans unknown: {e}" for e in errors]
    return "\n".join(lines)


def replica_text(w: WorkloadJson) -> str | None:
    """A workload's Serve replica, `<app>/<deployment> <replica id>` with `?`
    for what is unknown; None for a worker that is not a replica (or a
    snapshot from an exporter that does not tell)."""
    if w.get("kind") != "serve_replica":
        return None
    app, deployment, replica_id = ("?" if w.get(k) is None else w[k] for k in ("app", "deployment", "replica_id"))
    return f"{app}/{deployment} {replica_id}"


def workloads_text(workloads: Sequence[WorkloadJson], errors: Sequence[str] = ()) -> str:
    """`status`: each partition's workloads (its raylet's Ray workers), a Serve
    replica named, and why what is not known of one is not. None at all is
    said only when every exporter answered (`errors` says which did not)."""
    if not workloads:
        return "" if errors else "workloads: none"
    rows = table(
        workloads,
        ("PARTITION", lambda w: w["partition"]),
        ("WORKLOAD", lambda w: w["workload"]),
        ("PID", lambda w: w["pid"]),
        ("SERVE REPLICA", replica_text),
    )
    unknown = [
        f"{w['partition']} {w['workload']}: {field} unknown: {why}"
        for w in workloads
        for field, why in (w.get("unknown") or {}).items()
    ]
    return "\n".join([rows, *unknown])


def status_with_exporters_text(payload: HostStatus, seen: FromExporters | None) -> str:
    """`status`, and what this host's exporters say: each partition's workloads and the orphans."""
    text = status_text(payload)
    if seen is None:
        return text
    parts = [text, workloads_text(seen.workloads, seen.orphan_errors), orphans_text(seen.orphans, seen.orphan_errors)]
    return "\n\n".join(p for p in parts if p)


def top_text(payload: dict[str, Any]) -> str:
    def num(v: float | None, template: str) -> str:
        return "-" if v is None else template.format(v)

    def health(d: dict[str, Any]) -> str:
        """The device's family rule's verdict (the host's decider), and why it has no sample."""
        text = (d.get("health_state") or "-") + (f" ({d['reason']})" if d["reason"] else "")
        if d.get("out_of_service"):
            # Out of service: no sample, so what proves or repairs it is shown instead.
            check, repair = d.get("check"), d.get("repair")
            text += "; out of service"
            text += "; a check under way" if d.get("checking") else ""
            text += f"; last check {check['outcome']}: {check['detail']}" if check else "; not checked"
            text += f"; last repair {repair['outcome']}: {repair['detail']}" if repair else ""
        return text

    parts = table(
        payload["partitions"],
        ("PARTITION", lambda p: p["partition"]),
        ("HOST", lambda p: p["host"]),
        ("STATE", lambda p: "alive" if p["alive"] else "DEAD"),
        ("HEALTH", lambda p: (p.get("health") or {}).get("state") or "-"),
        ("NODE", lambda p: p["node_id"][:12]),
        ("DEVICES", lambda p: format_id_list(p["device_ids"]) or "-"),
        ("EXPORTER", lambda p: p["exporter"] if p["exporter"] != "ok" else f"ok ({p['took_s'] * 1000:.0f} ms)"),
    )
    devs = table(
        payload["devices"],
        ("DEVICE", lambda d: d["id"]),
        ("HOST", lambda d: d["host"]),
        ("PARTITION", lambda d: d["partition"]),
        ("UTIL", lambda d: num(d["utilization"], "{:.0%}")),
        ("MEMORY", lambda d: f"{gib(d['memory_used_bytes'])} / {gib(d['memory_total_bytes'])}"),
        ("POWER", lambda d: num(d.get("power_watts"), "{:.0f} W")),
        ("TEMP", lambda d: num(d.get("temperature_c"), "{:.0f} C")),
        ("HEALTH", health),
    )
    work = table(
        payload["workloads"],
        ("WORKLOAD", lambda w: w["workload"]),
        ("HOST", lambda w: w["host"]),
        ("PARTITION", lambda w: w["partition"]),
        ("SERVE REPLICA", replica_text),
        ("PIDS", lambda w: len(w["pids"])),
        ("CPU S", lambda w: f"{w['cpu_seconds']:.1f}"),
        ("RSS", lambda w: f"{w['rss_bytes'] / 1024**2:.0f} MiB"),
        (
            "DEVICE MEMORY",
            lambda w: ", ".join(f"{k} {v / 1024**2:.0f} MiB" for k, v in w["device_memory_bytes"].items()) or "-",
        ),
    )
    orphans = orphans_text(payload["orphans"])
    errors = "\n".join(f"error: {e}" for e in payload["errors"])
    head = payload.get("head")
    head_line = head and f"head raylet: node {head['node_id'][:12]} on {head['ip']}"
    return "\n\n".join(x for x in (head_line, parts, devs, work, orphans, errors) if x)


def cluster_status_text(view: ClusterView) -> str:
    """`status --cluster`: one row per partition raylet of every host."""
    parts = view.partitions
    dead = sum(not p.alive for p in parts)
    heading = f"cluster {view.gcs_address}: {len(parts)} partitions on {len(view.hosts)} hosts" + (
        f" ({dead} dead)" if dead else ""
    )
    warnings = [f"warning: {w}" for w in view.warnings]
    if not parts:
        return "\n".join([heading, *warnings])

    def amounts(p: ClusterPartition) -> str:
        keys = [k for k in (p.resource, "CPU") if k and k in p.total]
        return ", ".join(f"{k} {p.available.get(k, 0.0):g}/{p.total[k]:g}" for k in keys) or "-"

    rows = table(
        parts,
        ("HOST", lambda p: p.host),
        ("PARTITION", lambda p: p.partition),
        ("STATE", lambda p: "alive" if p.alive else "DEAD"),
        ("IP", lambda p: p.ip or "-"),
        ("NODE", lambda p: p.node_id[:12]),
        ("CORES", lambda p: p.mask or "-"),
        ("TYPE", lambda p: p.accelerator_type or "-"),
        ("FREE/TOTAL", amounts),
    )
    other = [f"other nodes (no partition label): {view.other_nodes}"] if view.other_nodes else []
    return "\n".join([heading, rows, *other, *warnings])
