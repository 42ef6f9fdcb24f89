"""Several hosts with real Ray across two test hosts (network namespaces) that
share ONE host name, as cloud images that all say `ubuntu` do: a host is its
name and its node IP, so everything here must still see two hosts.

One module-scoped cluster keeps the run short on a 2-core machine: host A runs
`ray-accel start --head`, host B `ray-accel start --address A`, two partitions
each of a mock trn1.32xlarge (32 NeuronCores, so 16 per partition), with the
metrics exporters on. The two hosts share one HOME, as on an NFS home, and
have no RAYACCEL_STATE_DIR: the default state directory
(`~/.ray-accel/<host name>/<node IP>/`) alone keeps their records apart. Each
host keeps its own TMPDIR and Ray temp dir, as real hosts do.

Drivers run inside host A's namespace (`cluster_driver.py`); processes are
told apart by the namespace they run in (`pids_in_netns`), never by name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ray_accel.core.hosts import host_key
from ray_accel.core.visibility import parse_visible_ids
from tests.multihost.hosts import Host, HostSet, pid_alive, pids_in_netns

pytestmark = [pytest.mark.multihost, pytest.mark.ray]

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "ray-accel")
DRIVER = str(ROOT / "tests/multihost/cluster_driver.py")
GCS_PORT = 6379  # ports are per namespace
PARTITIONS = ("p0", "p1")
CORES_PER_PARTITION = 16  # trn1.32xlarge: 16 devices x 2 cores, split in two
DEVICES_PER_HOST = 16
TASKS_PER_PARTITION = 200
HOSTNAME = "ubuntu"  # both hosts' name
# Small object stores: all hosts share this machine's /dev/shm.
# torch's gloo picks its address by resolving the host name and falls back to
# 127.0.0.1 when it does not resolve (torch 2.x, torch/csrc/distributed/c10d/
# ProcessGroupGloo.cpp, createDefaultDevice, "Unable to resolve hostname ...
# set the network interface to bind to with GLOO_SOCKET_IFNAME"). The test hosts'
# names resolve nowhere (no /etc/hosts entry), so name the interface, as on a
# real host whose name does not resolve to its cluster address; every raylet's
# workers inherit it from `ray-accel start`.
GLOO_ENV = {"GLOO_SOCKET_IFNAME": "eth0"}
RAY_ARGS = ["--object-store-memory", str(300 * 10**6), "--disable-usage-stats"]


def start_args(host: Host) -> list[str]:
    # --no-dashboard: two cores run four raylets and their exporters.
    return ["--partitions", "2", "--no-dashboard", "--json"]


def key(host: Host) -> str:
    """The host's key, as its host label and every view name it."""
    return host_key(host.hostname, host.ip)


def ray_args(host: Host) -> list[str]:
    return ["--", "--node-ip-address", host.ip, "--temp-dir", host.ray_temp_dir, *RAY_ARGS]


@dataclass
class Cluster:
    hs: HostSet
    a: Host
    b: Host
    env: dict[str, str]

    @property
    def address(self) -> str:
        return f"{self.a.ip}:{GCS_PORT}"

    def cli(self, host: Host, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return host.run([CLI, *args], env=self.env, timeout=timeout)

    def cli_json(self, host: Host, *args: str, timeout: float = 120) -> dict[str, Any]:
        proc = self.cli(host, *args, "--json", timeout=timeout)
        assert proc.returncode == 0, f"ray-accel {' '.join(args)} on {host}: rc {proc.returncode}\n{proc.stderr}"
        out: dict[str, Any] = json.loads(proc.stdout)
        return out

    def start_b(self) -> dict[str, Any]:
        proc = self.cli(self.b, "start", "--address", self.address, *start_args(self.b), *ray_args(self.b), timeout=300)
        assert proc.returncode == 0, f"join on B: rc {proc.returncode}\n{proc.stderr[-4000:]}"
        out: dict[str, Any] = json.loads(proc.stdout)
        return out

    def ensure_joined(self) -> None:
        """Host B's partitions running (a test that stopped B leaves them stopped)."""
        if not self.cli_json(self.b, "status")["running"]:
            self.start_b()

    def pids(self, host: Host) -> set[int]:
        return set(pids_in_netns({self.hs.netns_inodes[host.netns]}))

    def driver(self, mode: str, spec: dict[str, Any], timeout: float = 420) -> dict[str, Any]:
        proc = self.a.run([sys.executable, DRIVER, mode, self.address, json.dumps(spec)], env=self.env, timeout=timeout)
        assert proc.returncode == 0, f"{mode} driver: rc {proc.returncode}\n{proc.stderr[-6000:]}"
        out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return out


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    t0 = time.monotonic()
    with HostSet(2, hostname=HOSTNAME) as hs:
        a, b = hs.hosts
        assert a.hostname == b.hostname == HOSTNAME and a.ip != b.ip
        # One HOME for both (an NFS home) and no RAYACCEL_STATE_DIR ("" reads as unset).
        env = {
            "RAYACCEL_MOCK": "trn1.32xlarge",
            "HOME": str(a.home),
            "RAYACCEL_STATE_DIR": "",
            **GLOO_ENV,
        }
        c = Cluster(hs, a, b, env)
        head = c.cli(a, "start", "--head", "--port", str(GCS_PORT), *start_args(a), *ray_args(a), timeout=300)
        assert head.returncode == 0, f"head on A: rc {head.returncode}\n{head.stderr[-4000:]}"
        c.start_b()
        print(f"\ntwo hosts, 4 partitions up in {time.monotonic() - t0:.1f}s")
        try:
            yield c
        finally:
            for h in (b, a):  # stop by the record, by PID; the set's teardown sweeps the rest
                c.cli(h, "stop", timeout=120)


def test_status_cluster_lists_every_partition_of_both_hosts(cluster: Cluster) -> None:
    cluster.ensure_joined()
    a, b = cluster.a, cluster.b
    for host in (a, b):
        view = cluster.cli_json(host, "status", "--cluster")
        assert view["gcs_address"] == cluster.address
        alive = view["partitions"]
        assert len(alive) == 4 and all(p["alive"] for p in alive), view
        assert [(h["host"], h["name"], h["ips"]) for h in view["hosts"]] == [
            (key(h), HOSTNAME, [h.ip]) for h in sorted((a, b), key=key)
        ], "two hosts of one name are two hosts"
        for h, ip in ((a, a.ip), (b, b.ip)):
            mine = [p for p in alive if p["host"] == key(h)]
            assert sorted(p["partition"] for p in mine) == list(PARTITIONS)
            assert {p["ip"] for p in mine} == {ip}
            cores = [c for p in mine for c in p["core_ids"]]
            assert sorted(cores) == list(range(2 * CORES_PER_PARTITION))  # disjoint, the host's 32 cores
            for p in mine:
                assert p["resource"] == "neuron_cores" and p["total"]["neuron_cores"] == CORES_PER_PARTITION
                assert 0 <= p["available"]["neuron_cores"] <= CORES_PER_PARTITION
                assert p["mask"] == f"{p['core_ids'][0]}-{p['core_ids'][-1]}"
        assert len({p["node_id"] for p in alive}) == 4
    text = cluster.cli(a, "status", "--cluster")
    assert text.returncode == 0, text.stderr
    assert "4 partitions on 2 hosts" in text.stdout
    for h in (a, b):
        assert sum(key(h) in line for line in text.stdout.splitlines()) == 2
    print("\n" + text.stdout + "\n" + json.dumps(view["partitions"][0], indent=2))


def test_label_targeted_tasks_see_only_their_partition_on_their_host(cluster: Cluster) -> None:
    cluster.ensure_joined()
    a, b = cluster.a, cluster.b
    view = cluster.cli_json(a, "status", "--cluster")
    parts = {(p["host"], p["partition"]): p for p in view["partitions"] if p["alive"]}
    targets = [[key(h), p] for h in (a, b) for p in PARTITIONS]
    got = cluster.driver(
        "tasks", {"targets": targets, "per_target": TASKS_PER_PARTITION, "cores": [1, 2, 4, CORES_PER_PARTITION]}
    )
    assert got["driver_ip"] == a.ip
    results = got["results"]
    assert len(results) == 4 * TASKS_PER_PARTITION
    ip_of = {key(a): (a.ip, HOSTNAME), key(b): (b.ip, HOSTNAME)}
    seen: dict[tuple[str, str], set[int]] = {}
    for r in results:
        p = parts[(r["host"], r["partition"])]
        assert (r["ip"], r["hostname"]) == ip_of[r["host"]], r
        assert r["node_id"] == p["node_id"], r
        visible = parse_visible_ids(r["visible"])
        assert visible is not None and len(visible) == r["asked"], r
        assert visible == sorted(int(i) for i in r["accelerator_ids"]), r
        assert set(visible) <= set(p["core_ids"]), f"{r} outside {p['core_ids']}"
        seen.setdefault((r["host"], r["partition"]), set()).update(visible)
    # the whole-partition tasks saw exactly the partition's cores
    assert seen == {k: set(v["core_ids"]) for k, v in parts.items()}


def test_training_across_hosts_ranks_per_raylet(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> None:
    cluster.ensure_joined()
    a, b = cluster.a, cluster.b
    out = tmp_path_factory.mktemp("train")
    os.chmod(out, 0o777)
    ha, hb = key(a), key(b)
    workers = [[ha, "p0"], [ha, "p0"], [hb, "p0"], [hb, "p0"]]  # same partition name on both hosts
    got = cluster.driver("train", {"workers": workers, "cores": 2, "steps": 20, "out": str(out)})
    assert got["ranks"] == [f"rank{i}.json" for i in range(4)]
    reports = [json.loads((out / f"rank{i}.json").read_text()) for i in range(4)]
    view = {(p["host"], p["partition"]): p for p in cluster.cli_json(a, "status", "--cluster")["partitions"]}
    for rank, (r, (host, part)) in enumerate(zip(reports, workers, strict=True)):
        expected = {
            "world_rank": rank,
            "world_size": 4,
            "local_rank": rank % 2,
            "local_world_size": 2,
            "node_rank": rank // 2,
        }
        assert r["accel"] == expected, r
        assert r["ray"] == expected, r
        env = r["env"]
        assert (env["RANK"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"], env["NODE_RANK"]) == (
            str(rank),
            str(rank % 2),
            "2",
            str(rank // 2),
        )
        assert r["node_id"] == view[(host, part)]["node_id"] and r["partition"] == part
        assert r["ip"] == (a.ip if host == ha else b.ip)
        assert env["MASTER_ADDR"] == a.ip  # rank 0 is on host A, reachable from B
        assert env["NEURON_RT_ROOT_COMM_ID"] is not None and env["NEURON_RT_ROOT_COMM_ID"].split(":")[0] == a.ip
        visible = parse_visible_ids(env["NEURON_RT_VISIBLE_CORES"])
        assert visible is not None and len(visible) == 2 and set(visible) <= set(view[(host, part)]["core_ids"])
        assert r["losses"][-1] < r["losses"][0]
    assert len({json.dumps(r["weights"]) for r in reports}) == 1, [r["weights"] for r in reports]
    assert len({r["env"]["NEURON_RT_ROOT_COMM_ID"] for r in reports}) == 1
    # the two workers of one raylet see disjoint cores
    for host in (ha, hb):
        mine = [
            parse_visible_ids(r["env"]["NEURON_RT_VISIBLE_CORES"])
            for r, w in zip(reports, workers, strict=True)
            if w[0] == host
        ]
        assert not set(mine[0] or []) & set(mine[1] or [])


def test_shared_home_keeps_one_record_per_host(cluster: Cluster) -> None:
    cluster.ensure_joined()
    a, b = cluster.a, cluster.b
    by_name = Path(cluster.env["HOME"]) / ".ray-accel" / HOSTNAME
    records = {h: by_name / h.ip / "host.json" for h in (a, b)}
    assert all(p.is_file() for p in records.values()), records
    assert [p.name for p in (Path(cluster.env["HOME"]) / ".ray-accel").iterdir()] == [HOSTNAME]
    assert sorted(p.name for p in by_name.iterdir()) == sorted([a.ip, b.ip]), "one directory per node IP"
    for h in (a, b):
        st = cluster.cli_json(h, "status")
        assert st["state_file"] == str(records[h])
        assert st["host"] == HOSTNAME and st["host_ip"] == h.ip
        assert st["running"] and not st["warnings"], st
        pids = {p["pid"] for p in st["partitions"]}
        assert len(st["partitions"]) == 2 and pids <= cluster.pids(h), (h, pids)
        other = b if h is a else a
        assert not pids & cluster.pids(other)
        recorded = json.loads(records[h].read_text())
        assert (recorded["host"], recorded["host_ip"]) == (HOSTNAME, h.ip)
        assert all(p["labels"]["ray-accel.io/host"] == key(h) for p in recorded["partitions"])
        every = recorded_pids(recorded)  # raylets, GCS, launchers: all of this host only
        assert pids <= every and every <= cluster.pids(h) and not every & cluster.pids(other), (h, every)
        # One log monitor per host (Ray's `ray start --help`): the head raylet's on A, the first partition's on B.
        carriers = [
            entry["partition"]
            for entry in [*([recorded["head_raylet"]] if recorded.get("head_raylet") else []), *recorded["partitions"]]
            if any(proc["kind"] == "log_monitor" for proc in entry["processes"])
        ]
        assert carriers == [recorded["partitions"][0]["partition"] if h is b else recorded["head_raylet"]["partition"]]


def test_top_lists_every_device_of_both_hosts(cluster: Cluster) -> None:
    cluster.ensure_joined()
    a, b = cluster.a, cluster.b
    top = cluster.cli_json(a, "top", "--once", timeout=180)
    alive = [p for p in top["partitions"] if p["alive"]]
    assert sorted((p["host"], p["partition"]) for p in alive) == sorted((key(h), p) for h in (a, b) for p in PARTITIONS)
    assert all(p["exporter"] == "ok" for p in alive), [(p["host"], p["exporter"]) for p in alive]
    devices = [(d["host"], d["partition"], d["id"]) for d in top["devices"]]
    assert len(devices) == len(set(devices)) == 2 * DEVICES_PER_HOST, devices
    for h in (a, b):
        mine = [d for d in devices if d[0] == key(h)]
        assert len(mine) == DEVICES_PER_HOST and len({d[2] for d in mine}) == DEVICES_PER_HOST, mine
        assert sorted(d[1] for d in mine) == sorted(PARTITIONS * (DEVICES_PER_HOST // 2))
    assert not top["errors"], top["errors"]


def test_prometheus_scrapes_distinct_series_for_each_host(cluster: Cluster) -> None:
    cluster.ensure_joined()
    a, b = cluster.a, cluster.b
    # Exporters sample every 5 s and Ray's recorder reports every 10 s (the defaults, which
    # keep the load of two cores down for the other tests): series come within seconds.
    got = cluster.driver("prometheus", {"devices": 2 * DEVICES_PER_HOST, "hosts": 2, "timeout": 90})
    # One target per raylet: host a's head raylet and each host's two partitions.
    assert {t.rsplit(":", 1)[0] for t in got["targets"]} == {a.ip, b.ip} and len(got["targets"]) == 5
    devices = [(s["host"], s["partition"], s["device_id"]) for s in got["devices"]]
    assert len(devices) == len(set(devices)) == 2 * DEVICES_PER_HOST, f"each device of each host once: {devices}"
    for h in (a, b):
        mine = [s for s in got["devices"] if s["host"] == key(h)]
        assert len(mine) == DEVICES_PER_HOST, (key(h), mine)
        # served by a raylet of its own host, over the test network
        assert {s["instance"].rsplit(":", 1)[0] for s in mine} == {h.ip}, mine
    per_host = sorted((labels["host"], value) for labels, value in got["hosts"])
    assert per_host == sorted((key(h), float(DEVICES_PER_HOST)) for h in (a, b)), "host series once per host"


def recorded_pids(obj: Any) -> set[int]:
    """Every "pid" value anywhere in a state record."""
    if isinstance(obj, dict):
        own = {obj["pid"]} if isinstance(obj.get("pid"), int) else set()
        return own.union(*(recorded_pids(v) for v in obj.values()))
    if isinstance(obj, list):
        return set().union(*(recorded_pids(v) for v in obj))
    return set()


def test_stop_on_b_stops_only_b_and_a_keeps_serving(cluster: Cluster) -> None:
    cluster.ensure_joined()
    a, b = cluster.a, cluster.b
    before_a, before_b = cluster.pids(a), cluster.pids(b)
    assert before_a and before_b
    stopped = cluster.cli_json(b, "stop")
    assert cluster.pids(b) == set(), f"left on B: {cluster.pids(b)} ({stopped})"
    # Ray's worker pool may retire idle workers on A at any time; everything else stays.
    lasting_a = {p for p in before_a if not is_ray_worker(p)}
    assert lasting_a and all(pid_alive(p) for p in lasting_a), [p for p in lasting_a if not pid_alive(p)]
    st_a = cluster.cli_json(a, "status")
    assert st_a["running"] and all(p["alive"] for p in st_a["partitions"])
    assert not cluster.cli_json(b, "status")["running"]
    view = cluster.cli_json(a, "status", "--cluster")
    state = {(p["host"], p["partition"]): p["alive"] for p in view["partitions"]}
    ha, hb = key(a), key(b)
    assert [state[(ha, p)] for p in PARTITIONS] == [True, True]
    assert [state[(hb, p)] for p in PARTITIONS] == [False, False]
    # host A keeps serving label-targeted work
    got = cluster.driver("tasks", {"targets": [[ha, p] for p in PARTITIONS], "per_target": 20, "cores": [1]})
    assert len(got["results"]) == 40 and {r["ip"] for r in got["results"]} == {a.ip}


def is_ray_worker(pid: int) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return True  # gone already; only a worker may go
    return cmd.startswith("ray::") or "default_worker.py" in cmd
