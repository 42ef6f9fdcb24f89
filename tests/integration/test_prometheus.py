"""The dashboard with a real Prometheus: every panel query
returns data from a partitioned cluster, each device exactly once, tagged with
its partition and host.

Prometheus (Debian's package) scrapes the targets in Ray's service-discovery
file every second. A panel over a metric the product does not export yet is
a strict xfail (MISSING) naming what is missing; one that starts passing
fails until its entry is removed. Nothing is missing now: the job panels read
the phase gauge of a real `fit()` run on the cluster first.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from ray_accel.jobs.model import PHASES
from tests.dashboard_probe import device_owners, holders, metrics_targets, orphan, sd_file
from tests.dashboard_queries import PanelQuery, load, metric_names, panel_queries, variable_queries
from tests.integration import drivers
from tests.integration.cluster_harness import Cluster
from tests.prom import Prometheus, Series
from tests.prom import prometheus as prometheus  # the fixture, over ray_sd_file below

pytestmark = pytest.mark.ray

# What the product does not export yet. Remove an entry when it does: the
# queries it marks then pass, and a strict xfail that passes fails.
PREFIX = "*"  # an entry for every query (none now)
MISSING: dict[str, str] = {}
QUERY_WAIT_S = 3.0
DASHBOARD = load()


def pending(*metrics: str) -> list[str]:
    return list(dict.fromkeys(MISSING[k] for k in (PREFIX, *sorted(metrics)) if k in MISSING))


def xfail_if_pending(*metrics: str) -> list[pytest.MarkDecorator]:
    reasons = pending(*metrics)
    if not reasons:
        return []
    return [pytest.mark.xfail(strict=True, raises=AssertionError, reason="; ".join(reasons))]


def with_marks(q: PanelQuery) -> Any:
    return pytest.param(q, id=q.name, marks=xfail_if_pending(*metric_names(q.expr)))


@pytest.fixture(scope="module")
def cluster(trn1_cluster: Cluster) -> Cluster:
    """The shared cluster (tests.clusters.TRN1): dashboard on (Ray writes its
    service-discovery file from it), metrics every second."""
    return trn1_cluster


@pytest.fixture(scope="module")
def trained(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The job of one finished `fit()` with AcceleratorTorchConfig, as `ray-accel jobs` lists it."""
    part = cluster.status["partitions"][0]["partition"]
    name = f"prom-{uuid.uuid4().hex[:8]}"
    kw = {"partition": part, "out": str(tmp_path_factory.mktemp("fit")), "steps": 3, "workers": 1, "name": name}
    result = cluster.driver(drivers.TRAIN_JOB, json.dumps(kw), timeout=400)
    assert result["ok"], result
    listed = cluster.cli("jobs", "--json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    (job,) = [j for j in json.loads(listed.stdout)["jobs"] if j["name"] == name]
    assert job["phase"] == "Succeeded", job
    return dict(job)


@pytest.fixture(scope="module")
def held(cluster: Cluster) -> Iterator[dict[str, Any]]:
    with holders(cluster) as h:
        yield h


@pytest.fixture(scope="module")
def orphan_device(cluster: Cluster, held: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A non-worker process publishing the cores of the first partition's last
    device, which no holder has (holders take the first cores)."""
    first = cluster.status["partitions"][0]
    per_device = len(first["core_ids"]) // len(first["device_ids"])
    cores = ",".join(str(c) for c in first["core_ids"][-per_device:])
    with orphan(cluster, cores) as pid:
        yield {"pid": pid, "device_id": first["device_ids"][-1], "partition": first["partition"]}


@pytest.fixture(scope="module")
def ray_sd_file(cluster: Cluster) -> Path:
    return sd_file(cluster)


@pytest.fixture(scope="module")
def ray_metrics_targets(cluster: Cluster) -> list[str]:
    return metrics_targets(cluster)


@pytest.fixture(scope="module")
def settled(
    prometheus: Prometheus, trained: dict[str, Any], held: dict[str, Any], orphan_device: dict[str, Any]
) -> Prometheus:
    """Prometheus once every holder's workload has a CPU rate (two scrapes of it at least)
    and the finished job's phase is in."""
    found = prometheus.wait_for_series(f'ray_accel_job_phase{{job_id="{trained["id"]}"}} == 1', timeout_s=60)
    assert found, f"no phase for job {trained['id']} after 60 s"
    for h in held["holders"].values():
        found = prometheus.wait_for_series(
            f'rate(ray_accel_workload_cpu_seconds{{workload=~".*\\\\[{h["pid"]}\\\\]"}}[1m])',
            timeout_s=60,
        )
        assert found, f"no CPU rate for holder {h} after 60 s"
    return prometheus


def query_soon(prom: Prometheus, q: str) -> list[Series]:
    return prom.wait_for_series(q, timeout_s=QUERY_WAIT_S)


def test_harness_scrapes_every_ray_target_and_each_device_once(prometheus: Prometheus, cluster: Cluster) -> None:
    assert psutil.Process(prometheus.pid).name() == "prometheus"
    listed = prometheus.wait_for_targets(required=metrics_targets(cluster))
    up = {labels["instance"]: value for labels, value in prometheus.query('up{job="ray"}')}
    assert up == dict.fromkeys(listed, 1.0), "every target of Ray's SD file scraped and up"
    owners = device_owners(cluster)
    raylet = dict(zip((p["partition"] for p in cluster.status["partitions"]), metrics_targets(cluster), strict=True))
    series = prometheus.wait_for_series("ray_accel_device_utilization", timeout_s=60)
    assert not prometheus.query('{__name__=~"ray_ray_accel_.*"}'), "Ray's prefix is not doubled"
    seen = Counter(labels["device_id"] for labels, _ in series)
    assert seen == Counter(list(owners)), "each device exactly once"
    for labels, value in series:
        assert labels["partition"] == owners[labels["device_id"]]
        assert labels["instance"] == raylet[labels["partition"]], "served by the raylet of its partition"
        assert 0.0 <= value <= 1.0


def check_shape(q: PanelQuery, series: list[Series], owners: dict[str, str], host: str) -> None:
    """Series per device, partition or host appear once each, on this cluster's one host, and
    a partition always comes with its host."""
    for labels, _ in series:
        if "partition" in labels:
            assert labels.get("host") == host, f"{q.name}: partition {labels['partition']} not on host {host}: {labels}"
    per_process = any("workload" in labels or "pid" in labels for labels, _ in series)
    if per_process or not series:
        return
    if all("device_id" in labels for labels, _ in series):
        # A count by outcome (checks, repairs) has each device once per outcome.
        outcomes = {labels.get("outcome") for labels, _ in series}
        devices = Counter((labels["partition"], labels["device_id"], labels.get("outcome")) for labels, _ in series)
        wanted = Counter((p, d, o) for d, p in owners.items() for o in outcomes)
        assert devices == wanted, f"{q.name}: each device once (per outcome), in its partition"
    elif all("partition" in labels for labels, _ in series):
        parts = Counter(labels["partition"] for labels, _ in series)
        assert parts == Counter(set(owners.values())), f"{q.name}: each partition once"
    elif all("host" in labels for labels, _ in series):
        assert [labels["host"] for labels, _ in series] == [host], f"{q.name}: the host once"


@pytest.mark.parametrize("query", [with_marks(q) for q in panel_queries(DASHBOARD)])
def test_panel_query_returns_each_thing_once(settled: Prometheus, cluster: Cluster, query: PanelQuery) -> None:
    series = query_soon(settled, query.expr)
    assert series, f"{query.name}: no data for {query.expr}"
    hosts = [labels["host"] for labels, _ in settled.query("ray_accel_host_devices")]
    assert len(hosts) == 1, f"one host, reported once: {hosts}"
    check_shape(query, series, device_owners(cluster), hosts[0])


@pytest.mark.parametrize(
    "variable, promql",
    [
        pytest.param(n, q, id=n, marks=xfail_if_pending(*metric_names(q)))
        for n, q in variable_queries(DASHBOARD).items()
    ],
)
def test_template_variables_have_values(settled: Prometheus, cluster: Cluster, variable: str, promql: str) -> None:
    values = {labels.get(variable) for labels, _ in query_soon(settled, promql)}
    assert values and None not in values, f"${variable} has no values: {promql}"
    if variable == "partition":
        assert values == {p["partition"] for p in cluster.status["partitions"]}


def test_orphan_is_named_with_pid_command_device_and_partition(
    settled: Prometheus, orphan_device: dict[str, Any]
) -> None:
    series = query_soon(settled, f'ray_accel_device_orphan_processes{{pid="{orphan_device["pid"]}"}}')
    assert [(labels["device_id"], labels["partition"]) for labels, _ in series] == [
        (orphan_device["device_id"], orphan_device["partition"])
    ]
    labels = series[0][0]
    assert labels["host"] and "python" in labels["command"]


def test_finished_fit_is_a_job_in_one_phase(settled: Prometheus, trained: dict[str, Any]) -> None:
    # The store sets the gauge again every few seconds and a busy machine may
    # report it late: a gap of a few seconds in the series is no answer, so
    # wait (at most 30 s) for every phase's series before judging them.
    q = f'ray_accel_job_phase{{job_id="{trained["id"]}"}}'
    deadline = time.monotonic() + 30
    series = settled.query(q)
    while {labels["phase"] for labels, _ in series} != set(PHASES) and time.monotonic() < deadline:
        time.sleep(1)
        series = settled.query(q)
    current = [labels["phase"] for labels, value in series if value == 1]
    assert current == ["Succeeded"], f"job {trained['id']}: one current phase, got {series}"
    assert {labels["phase"] for labels, _ in series} == set(PHASES), "every phase is a series (0 or 1)"
    assert {labels["name"] for labels, _ in series} == {trained["name"]}
