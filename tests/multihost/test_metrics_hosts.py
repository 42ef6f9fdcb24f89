"""Issue 13, acceptance 3, with real Ray across two test hosts (network namespaces):
every device of both hosts appears exactly once on Ray's Prometheus endpoints,
tagged with its host and partition; host-level values once per host.

Host A runs `ray-accel start --head`, host B `ray-accel start --address A`, two
partitions each of a mock trn1.32xlarge (16 devices, 8 per partition), with the
metrics exporters on. Ray's metrics agent runs next to every raylet whether or
not the head's dashboard runs, so `--no-dashboard` keeps the run small. A driver
inside host A's namespace reads every raylet's metrics export port from the GCS
node table (`ray.nodes()`: `NodeManagerAddress`, `MetricsExportPort`) and
scrapes them all, so each host's endpoints are reached over the test network.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.multihost.conftest import Hosts
from tests.multihost.hosts import Host

pytestmark = [pytest.mark.multihost, pytest.mark.ray]

CLI = str(Path(sys.executable).parent / "ray-accel")
GCS_PORT = 6379  # ports are per namespace
PARTITIONS = ("p0", "p1")
DEVICES_PER_HOST = 16  # trn1.32xlarge
DEVICE_GAUGES = (
    "ray_accel_device_utilization",
    "ray_accel_device_memory_used_bytes",
    "ray_accel_device_memory_total_bytes",
    "ray_accel_device_healthy",
)
HOST_GAUGES = ("ray_accel_node_devices", "ray_accel_node_host_memory_used_bytes")
SAMPLE = re.compile(r"^(\w+)\{(.*)\}\s+(\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# Exporters sample every second and Ray's recorder reports every second, so
# series appear within seconds of `start` (the defaults are 5 s and 10 s).
ENV = {
    "RAYACCEL_MOCK": "trn1.32xlarge",
    "RAYACCEL_METRICS_INTERVAL_S": "1",
    "RAY_metrics_report_interval_ms": "1000",
}
RAY_ARGS = ["--object-store-memory", str(300 * 10**6), "--disable-usage-stats"]  # hosts share /dev/shm

# Runs inside host A: polls every alive raylet's Prometheus endpoint until both
# hosts' device series and host series are there (or the deadline), then prints
# the endpoints and the `ray_accel_*` lines it last saw, as one JSON line.
SCRAPE = r"""
import json, sys, time, urllib.request
import ray
address, want_devices, want_hosts, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
ray.init(address=address, logging_level="ERROR", log_to_driver=False)
nodes = [n for n in ray.nodes() if n["Alive"]]
endpoints = sorted((n["NodeManagerAddress"], int(n["MetricsExportPort"]), n["NodeID"]) for n in nodes)
deadline = time.monotonic() + timeout
while True:
    lines, errors = {}, []
    for ip, port, node_id in endpoints:
        try:
            with urllib.request.urlopen(f"http://{ip}:{port}/metrics", timeout=10) as r:
                text = r.read().decode()
        except OSError as e:
            errors.append(f"{ip}:{port}: {e}")
            continue
        lines[f"{ip}:{port}"] = [l for l in text.splitlines() if l.startswith("ray_accel_")]
    every = [l for ls in lines.values() for l in ls]
    devices = sum(l.startswith("ray_accel_device_utilization{") for l in every)
    hosts = sum(l.startswith("ray_accel_node_devices{") for l in every)
    if (devices >= want_devices and hosts >= want_hosts and not errors) or time.monotonic() > deadline:
        break
    time.sleep(1)
waited = timeout - (deadline - time.monotonic())
print(json.dumps({"endpoints": endpoints, "lines": lines, "errors": errors, "waited": waited}))
"""


def parse(lines: list[str]) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in lines:
        m = SAMPLE.match(line)
        if m:
            out.append((m.group(1), dict(LABEL.findall(m.group(2))), float(m.group(3))))
    return out


def cli_json(host: Host, *args: str, ray: tuple[str, ...] = (), timeout: float = 120) -> dict[str, Any]:
    proc = host.run([CLI, *args, "--json", *ray], env=ENV, timeout=timeout)
    assert proc.returncode == 0, f"ray-accel {' '.join(args)} on {host}: rc {proc.returncode}\n{proc.stderr[-4000:]}"
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def start(host: Host, *where: str) -> dict[str, Any]:
    ray = ("--", "--node-ip-address", host.ip, "--temp-dir", host.ray_temp_dir, *RAY_ARGS)
    return cli_json(host, "start", *where, "--agents", "2", "--no-dashboard", ray=ray, timeout=300)


def test_every_device_of_both_hosts_once_with_host_and_partition(hosts: Hosts) -> None:
    t0 = time.monotonic()
    a, b = hosts(2)
    address = f"{a.ip}:{GCS_PORT}"
    started: list[Host] = []
    try:
        started.append(a)
        start(a, "--head", "--port", str(GCS_PORT))
        started.append(b)
        start(b, "--address", address)
        records = {h: json.loads((h.state_dir / "node.json").read_text()) for h in (a, b)}
        assert all(r["metrics"] is True for r in records.values()), "a host's exporters were not deployed"
        up = time.monotonic() - t0
        owner = {
            (h.hostname, d): p["partition"]
            for h in (a, b)
            for p in cli_json(h, "status")["partitions"]
            for d in p["device_ids"]
        }
        assert len(owner) == 2 * DEVICES_PER_HOST
        for h in (a, b):
            per_part = [sorted(d for (hn, d), p in owner.items() if hn == h.hostname and p == q) for q in PARTITIONS]
            assert [len(ds) for ds in per_part] == [DEVICES_PER_HOST // 2] * 2, (h, per_part)
        proc = a.run(
            [sys.executable, "-c", SCRAPE, address, str(2 * DEVICES_PER_HOST), "2", "60"], env=ENV, timeout=150
        )
        assert proc.returncode == 0, f"scrape driver: rc {proc.returncode}\n{proc.stderr[-4000:]}"
        got = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        for h in reversed(started):  # stop by the record, by PID; the fixture's teardown sweeps the rest
            h.run([CLI, "stop", "--json"], env=ENV, timeout=120)
    assert not got["errors"], got["errors"]
    endpoints = got["endpoints"]
    assert len(endpoints) == 4 and {ip for ip, _, _ in endpoints} == {a.ip, b.ip}, endpoints
    samples = [s for lines in got["lines"].values() for s in parse(lines)]
    expected = sorted((hn, p, d) for (hn, d), p in owner.items())
    for name in DEVICE_GAUGES:
        tagged = sorted((lab["host"], lab["partition"], lab["device_id"]) for n, lab, _ in samples if n == name)
        assert tagged == expected, f"{name}: every device of both hosts once, with host and partition"
    # each series is served by a raylet of its own host
    for endpoint, lines in got["lines"].items():
        ip = endpoint.rsplit(":", 1)[0]
        host = a.hostname if ip == a.ip else b.hostname
        assert {lab["host"] for _, lab, _ in parse(lines)} <= {host}, (endpoint, lines[:3])
    for name in HOST_GAUGES:
        per_host = sorted(lab["host"] for n, lab, _ in samples if n == name)
        assert per_host == sorted([a.hostname, b.hostname]), f"{name}: once per host, not once per raylet"
    assert [v for n, _, v in samples if n == "ray_accel_node_devices"] == [float(DEVICES_PER_HOST)] * 2
    print(
        f"\ntwo hosts, 4 partitions with exporters up in {up:.1f}s; series after {got['waited']:.1f}s; "
        f"{len(samples)} ray_accel_* samples from {len(endpoints)} endpoints: {sorted(got['lines'])}"
    )
    for endpoint, lines in sorted(got["lines"].items()):
        print(endpoint, len(lines), next((ln for ln in lines if ln.startswith(DEVICE_GAUGES[0])), None))
        print(endpoint, [ln for ln in lines if ln.startswith(HOST_GAUGES[0])])
