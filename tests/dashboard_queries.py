"""The PromQL of the Grafana dashboard (dashboards/ray-accel.json), ready to run.

Grafana substitutes template variables before it sends a query; so does this,
with each variable's "All" value (`allValue`, `.+` here, so a series that
lacks the label matches nothing) unless told otherwise, and with fixed
durations for Grafana's own `$__rate_interval` and the like. Also the metric
schema every panel must be answerable from, and the checks that hold a query
to it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parent.parent / "dashboards" / "ray-accel.json"

DEVICE = frozenset({"host", "partition", "device_id", "family", "accelerator_type"})
WORKLOAD = frozenset({"host", "partition", "workload"})
HOST = frozenset({"host", "family", "accelerator_type"})
# The names and labels ray-accel exports, as Prometheus sees them.
METRICS: Mapping[str, frozenset[str]] = {
    "ray_accel_device_utilization": DEVICE,
    "ray_accel_device_memory_used_bytes": DEVICE,
    "ray_accel_device_memory_total_bytes": DEVICE,
    "ray_accel_device_healthy": DEVICE,
    "ray_accel_device_power_watts": DEVICE,
    "ray_accel_device_temperature_celsius": DEVICE,
    "ray_accel_workload_rss_bytes": WORKLOAD,
    "ray_accel_workload_cpu_seconds": WORKLOAD,
    "ray_accel_workload_device_memory_bytes": WORKLOAD | {"device_id"},
    "ray_accel_host_devices": HOST,
    "ray_accel_host_memory_used_bytes": HOST,
    "ray_accel_device_orphan_processes": frozenset({"host", "partition", "device_id", "pid", "command"}),
    "ray_accel_job_phase": frozenset({"job_id", "name", "phase"}),
    "ray_accel_partition_state": frozenset({"host", "partition", "state"}),
    "ray_accel_device_health_state": frozenset({"host", "partition", "device_id", "state"}),
    "ray_accel_device_health_events": frozenset({"host", "partition", "device_id", "kind", "code"}),
    "ray_accel_device_checks_total": frozenset({"host", "partition", "device_id", "outcome"}),
    "ray_accel_device_repairs_total": frozenset({"host", "partition", "device_id", "outcome"}),
}
# Ray's metrics agent adds SessionName (and Component, NodeAddress, Version,
# WorkerId) to every metric, Prometheus adds instance and job; panels may
# rely on SessionName only, as Ray's own dashboards do.
RAY_LABELS = frozenset({"SessionName"})
# Grafana's built-in variables, at values that suit a 1 s scrape interval.
GRAFANA_BUILTINS: Mapping[str, str] = {"__rate_interval": "1m", "__interval": "15s", "__range": "5m"}

_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)(?::\w+)?\]\]|\$(\w+)")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_MATCHERS = re.compile(r"\{([^}]*)\}")
_MATCHER_LABEL = re.compile(r"(\w+)\s*(?:=~|!~|!=|=)")
_IDENT = re.compile(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?")
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2", "group_left", "group_right"})
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(.+?)\s*,\s*(\w+)\s*\)\s*$", re.S)


@dataclass(frozen=True)
class PanelQuery:
    panel_id: int
    title: str
    ref_id: str
    expr: str

    @property
    def name(self) -> str:
        """A test id: panel id, target and title."""
        return f"{self.panel_id}{self.ref_id}-{re.sub(r'[^a-z0-9]+', '-', self.title.lower()).strip('-')}"


def load(path: Path = DASHBOARD) -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(path.read_text())
    return dashboard


def panels(dashboard: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every panel with queries; a collapsed row keeps its panels inside it."""
    out: list[dict[str, Any]] = []
    for p in dashboard.get("panels", []):
        if p.get("type") == "row":
            out.extend(q for q in p.get("panels", []) if q.get("type") != "row")
        else:
            out.append(p)
    return out


def variables(dashboard: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}


def all_values(dashboard: Mapping[str, Any]) -> dict[str, str]:
    """What each template variable stands for when "All" is selected."""
    return {
        name: v.get("allValue") or ".*"
        for name, v in variables(dashboard).items()
        if v.get("type") in ("query", "custom", "textbox")
    }


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """`expr` with `$var`, `${var}`, `${var:fmt}` and `[[var]]` replaced; an unknown variable is an error naming it."""

    def one(m: re.Match[str]) -> str:
        name = next(g for g in m.groups() if g is not None)
        if name not in values:
            raise KeyError(f"variable ${name} in {expr!r} has no value (known: {sorted(values)})")
        return values[name]

    return _VARIABLE.sub(one, expr)


def panel_queries(dashboard: Mapping[str, Any], values: Mapping[str, str] | None = None) -> list[PanelQuery]:
    """Every panel target's PromQL, variables substituted (by "All" unless `values` says otherwise)."""
    subs = {**GRAFANA_BUILTINS, **all_values(dashboard), **(values or {})}
    return [
        PanelQuery(p["id"], p.get("title", ""), t.get("refId", "A"), substitute(t["expr"], subs))
        for p in panels(dashboard)
        for t in p.get("targets", [])
        if t.get("expr")
    ]


def variable_queries(dashboard: Mapping[str, Any], values: Mapping[str, str] | None = None) -> dict[str, str]:
    """PromQL that finds each query variable's values: Grafana's
    `label_values(selector, label)` is the label of the selector's series."""
    subs = {**GRAFANA_BUILTINS, **all_values(dashboard), **(values or {})}
    out = {}
    for name, v in variables(dashboard).items():
        if v.get("type") != "query":
            continue
        query = v["query"]["query"] if isinstance(v.get("query"), dict) else v.get("query", "")
        m = _LABEL_VALUES.match(query)
        if m is None:
            raise ValueError(f"variable {name}: only label_values(selector, label) is understood, not {query!r}")
        out[name] = f"count by ({m.group(2)}) ({substitute(m.group(1), subs)})"
    return out


def _strip_strings(expr: str) -> str:
    return _STRING.sub('""', expr)


def label_names(expr: str) -> set[str]:
    """Labels a query matches on or groups by."""
    bare = _strip_strings(expr)
    names = {label for body in _MATCHERS.findall(bare) for label in _MATCHER_LABEL.findall(body)}
    for group in _GROUPING.findall(bare):
        names.update(n.strip() for n in group.split(",") if n.strip())
    return names


def grouping_labels(expr: str) -> set[str]:
    """Labels of `by (...)` clauses: what an aggregating query keeps."""
    return {
        n.strip()
        for group in re.findall(r"\bby\s*\(([^)]*)\)", _strip_strings(expr))
        for n in group.split(",")
        if n.strip()
    }


def metric_names(expr: str) -> set[str]:
    """Metric names a query selects (identifiers that are not functions, keywords, labels or durations)."""
    bare = _MATCHERS.sub("", _GROUPING.sub("", _strip_strings(expr)))
    bare = re.sub(r"\[[^\]]*\]", "", bare)
    return {m.group(1) for m in _IDENT.finditer(bare) if m.group(2) is None and m.group(1).lower() not in _KEYWORDS}


def schema_problems(expr: str, schema: Mapping[str, frozenset[str]] = METRICS) -> list[str]:
    """Why `expr` cannot be answered from `schema` alone (empty when it can)."""
    metrics = metric_names(expr)
    problems = [f"unknown metric {m}" for m in sorted(metrics - set(schema))]
    if not metrics:
        problems.append("selects no metric")
    known = set(RAY_LABELS).union(*(schema[m] for m in metrics if m in schema))
    problems += [f"label {label} is not on {sorted(metrics)}" for label in sorted(label_names(expr) - known)]
    return problems
