"""The Grafana dashboard: every panel answerable from the exported metrics, filterable by host and partition."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.dashboard_queries import (
    METRICS,
    PanelQuery,
    grouping_labels,
    label_names,
    load,
    metric_names,
    panel_queries,
    panels,
    schema_problems,
    substitute,
    variable_queries,
    variables,
)

DASHBOARD = load()


def test_every_panel_has_a_query_and_a_unique_id() -> None:
    ps = panels(DASHBOARD)
    assert ps, "no panels"
    assert all(p.get("targets") and all(t.get("expr") for t in p["targets"]) for p in ps)
    ids = Counter(p["id"] for p in DASHBOARD["panels"])
    assert max(ids.values()) == 1, ids


@pytest.mark.parametrize("query", panel_queries(DASHBOARD), ids=lambda q: q.name)
def test_query_is_answerable_from_the_exported_metrics_alone(query: PanelQuery) -> None:
    assert schema_problems(query.expr) == []


def test_every_exported_metric_has_a_panel() -> None:
    used = set().union(*(metric_names(q.expr) for q in panel_queries(DASHBOARD)))
    assert used == set(METRICS)


def test_queries_follow_the_host_and_partition_variables() -> None:
    """A panel over a metric with a host or partition label filters by that variable (a view
    aggregated by host alone may skip the partition filter), and all by SessionName."""
    for p in panels(DASHBOARD):
        for t in p["targets"]:
            expr = t["expr"]
            labels = set().union(*(METRICS[m] for m in metric_names(expr)))
            assert 'SessionName=~"$SessionName"' in expr, (p["title"], expr)
            kept = grouping_labels(expr)
            for var in ("host", "partition"):
                if var in labels and (not kept or var in kept):
                    assert f'{var}=~"${var}"' in expr, (p["title"], var, expr)


def test_templating_follows_rays_dashboards() -> None:
    """Ray's shipped dashboards (ray/dashboard/modules/metrics/dashboards/*_base.json): a hidden
    datasource variable, SessionName, `${datasource}` on every panel and query."""
    v = variables(DASHBOARD)
    assert v["datasource"]["type"] == "datasource" and v["datasource"]["query"] == "prometheus"
    for name in ("SessionName", "host", "partition"):
        assert v[name]["type"] == "query" and v[name]["includeAll"] and v[name]["allValue"] == ".+", name
        assert v[name]["datasource"] == "${datasource}"
    assert v["host"]["multi"] and v["partition"]["multi"]
    for p in panels(DASHBOARD):
        assert p["datasource"] == "${datasource}"
        assert all(t["datasource"] == "${datasource}" for t in p["targets"])
    assert DASHBOARD["uid"] and DASHBOARD["schemaVersion"] >= 27


def test_substitution_uses_the_all_value_and_grafana_builtins() -> None:
    exprs = [q.expr for q in panel_queries(DASHBOARD)]
    assert not any("$" in e for e in exprs)
    assert any('host=~".+"' in e for e in exprs) and any("[1m]" in e for e in exprs)
    relaxed = [q.expr for q in panel_queries(DASHBOARD, {"host": ".*"})]
    assert any('host=~".*"' in e for e in relaxed) and not any('host=~".+"' in e for e in relaxed)


def test_variable_queries_are_promql_for_label_values() -> None:
    assert variable_queries(DASHBOARD) == {
        "SessionName": "count by (SessionName) (ray_accel_host_devices)",
        "host": 'count by (host) (ray_accel_host_devices{SessionName=~".+"})',
        "partition": 'count by (partition) (ray_accel_device_memory_total_bytes{SessionName=~".+",host=~".+"})',
    }


def test_unknown_variable_is_an_error_naming_it() -> None:
    with pytest.raises(KeyError, match=r"\$nope"):
        substitute('x{a=~"$nope"}', {"a": "1"})


def test_schema_check_catches_unknown_metrics_and_labels() -> None:
    assert schema_problems('ray_accel_host_devices{partition=~"p0"}') == [
        "label partition is not on ['ray_accel_host_devices']"
    ]
    assert schema_problems("rate(ray_node_cpu_seconds[1m])") == ["unknown metric ray_node_cpu_seconds"]
    assert schema_problems("vector(1)") == ["selects no metric"]


def test_names_ignore_strings_functions_durations_and_keywords() -> None:
    expr = (
        'sum by (host) (rate(ray_accel_workload_cpu_seconds{workload=~"ray_accel_fake.*"}[5m] offset 1m)) '
        "/ on(host) group_left ray_accel_host_devices > bool 1e3 and ray_accel_host_devices unless inf"
    )
    assert metric_names(expr) == {"ray_accel_workload_cpu_seconds", "ray_accel_host_devices"}
    assert label_names(expr) == {"host", "workload"}


NAMES = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,11}", fullmatch=True)
VALUES = st.text(st.characters(blacklist_characters="$[]{}\\", blacklist_categories=["Cs"]), max_size=12)


@given(
    st.dictionaries(NAMES, VALUES, min_size=1, max_size=5), st.sampled_from(["${%s}", "$%s", "[[%s]]", "${%s:regex}"])
)
def test_substitution_replaces_every_form_and_leaves_no_variable(values: dict[str, str], form: str) -> None:
    names = sorted(values)
    expr = " + ".join(f'm{{{n}=~"{form % n}"}}' for n in names)
    out = substitute(expr, values)
    assert out == " + ".join(f'm{{{n}=~"{values[n]}"}}' for n in names)
    assert not re.search(r"\$\w|\[\[", out)
