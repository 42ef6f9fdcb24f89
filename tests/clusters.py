"""Clusters for the Ray tier: how one is started, and the ones tests share.

A `ray-accel start` costs about 20 s on two cores, so the tests that only
read a cluster (run tasks and fits on it, scrape it, list it through Ray's
tools) share one per `ClusterSpec`, across modules. At most one shared
cluster is alive at a time: two clusters on one host hand out the same worker
ports (Ray's default range goes out in order in every raylet) and halve the
CPU each test sees, so the pool stops the current one before it starts
another, and before any test that starts a cluster of its own runs. A test
that changes its cluster (stops it, kills a raylet, injects faults) never
uses a shared one. `order` groups the tier's tests by the cluster they share,
keeping pytest-randomly's order otherwise, so each spec starts once a session.

The dashboard is off unless a spec says otherwise: only tests of the
dashboard itself, Ray's state API, `ray job submit` and ray-accel's job store
(which asks the state API whether a controller is alive) need it.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from ray_accel.cluster.host import free_port
from tests.cli_process import repo_pythonpath, run_cli


def last_json(stdout: str) -> Any:
    """The driver's result: its last line that is a JSON object or list (Ray may print
    a warning after it while shutting down)."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith(("{", "[")):
            try:
                return json.loads(line)
            except ValueError:
                continue
    raise AssertionError(f"no JSON result line in the driver's output: {stdout[-2000:]!r}")


@dataclass
class Cluster:
    env: dict[str, str]
    status: dict[str, Any]
    start_log: str = ""

    @property
    def address(self) -> str:
        return str(self.status["gcs_address"])

    @property
    def state_dir(self) -> Path:
        return Path(self.env["RAYACCEL_STATE_DIR"])

    def part(self, name: str) -> dict[str, Any]:
        return next(p for p in self.status["partitions"] if p["partition"] == name)

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, env=self.env, timeout=timeout)

    def refresh(self) -> dict[str, Any]:
        proc = self.cli("status", "--json")
        assert proc.returncode == 0, proc.stderr
        self.status = json.loads(proc.stdout)
        return self.status

    def driver_env(self) -> dict[str, str]:
        """A user's shell after `ray-accel start`: the driver environment that
        `status --json` prints, and Ray's usual RAY_ADDRESS."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAYACCEL_")}
        env.update(self.status["env"], RAY_ADDRESS=self.address, PYTHONPATH=repo_pythonpath())
        return env

    def driver(self, script: str, *args: str, timeout: float = 300) -> Any:
        proc = subprocess.run(
            [sys.executable, "-c", script, self.address, *args],
            env=self.driver_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return last_json(proc.stdout)

    def drivers(self, script: str, arg_lists: Sequence[Sequence[str]], timeout: float = 300) -> list[Any]:
        """`script` in one driver per argument list, all at once (for work that
        must overlap, such as two jobs at once); their results in the same
        order. Not a way to save time: on two cores fits are CPU-bound."""
        with concurrent.futures.ThreadPoolExecutor(len(arg_lists)) as pool:
            futures = [pool.submit(self.driver, script, *args, timeout=timeout) for args in arg_lists]
            return [f.result() for f in futures]

    def alive(self) -> bool:
        """Every raylet `start` reported is still running (a cheap check, no GCS call)."""
        return all(psutil.pid_exists(int(p["pid"])) for p in self.status["partitions"])

    def stop(self) -> subprocess.CompletedProcess[str]:
        return self.cli("stop", "--grace", "2", "--json")


class StartFailed(RuntimeError):
    """`ray-accel start` did not bring the cluster up."""


@dataclass(frozen=True)
class ClusterSpec:
    """A mock head with `partitions` partitions, as a test asks for it."""

    name: str
    preset: str
    partitions: int
    start_args: tuple[str, ...] = ()
    ray_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, hash=False, compare=True)
    dashboard: bool = False

    def command(self, port: int) -> list[str]:
        dashboard = [] if self.dashboard else ["--no-dashboard"]
        ray = ["--", *self.ray_args] if self.ray_args else []
        return [
            "start",
            "--head",
            "--partitions",
            str(self.partitions),
            "--port",
            str(port),
            *dashboard,
            *self.start_args,
            "--json",
            *ray,
        ]


def start_cluster(tmp: Path, spec: ClusterSpec) -> Cluster:
    """Start `spec` with its state under `tmp`; on failure nothing is left running."""
    # Workers import the example hooks and train loop from the repository.
    env = {
        "RAYACCEL_MOCK": spec.preset,
        "RAYACCEL_STATE_DIR": str(tmp / "state"),
        "PYTHONPATH": repo_pythonpath(),
        **spec.env,
    }
    started = False
    try:
        proc = run_cli(*spec.command(free_port()), env=env, timeout=300)
        started = proc.returncode == 0
    finally:
        # A failed start, or one interrupted (SIGINT, a timeout: subprocess.run
        # killed it before it could undo its launches): its record names what
        # it started.
        if not started:
            run_cli("stop", "--grace", "2", env=env)
    if not started:
        raise StartFailed(f"ray-accel start ({spec.name}) failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return Cluster(env, json.loads(proc.stdout), proc.stderr)


# The one cluster most tests share: two partitions of a mock trn1.32xlarge
# (16 NeuronCores each), the user's own labels and a host resource (divided
# between the partitions), the dashboard (Ray's tools and the job store need
# it), and metrics every second (the metrics and Prometheus tests read them).
TRN1 = ClusterSpec(
    "trn1",
    "trn1.32xlarge",
    2,
    start_args=("--labels", "team=ml,example.com/zone=a", "--resources", '{"license": 3}'),
    env={"RAYACCEL_METRICS_INTERVAL_S": "1", "RAY_metrics_report_interval_ms": "1000"},
    dashboard=True,
)
# Four partitions of 8 cores: whole linked partitions for training jobs.
TRN1_X4 = ClusterSpec("trn1x4", "trn1.32xlarge", 4, dashboard=True)

# Fixture name -> the spec it shares (the fixtures are in tests/integration/conftest.py).
SHARED_FIXTURES: Mapping[str, ClusterSpec] = {"trn1_cluster": TRN1, "trn1x4_cluster": TRN1_X4}


class SharedClusters:
    """At most one shared cluster alive; `get` starts a spec only when another is current."""

    def __init__(self, base: Path) -> None:
        self._base = base
        self._current: tuple[ClusterSpec, Cluster] | None = None
        self.starts: list[str] = []

    def get(self, spec: ClusterSpec) -> Cluster:
        if self._current is not None and self._current[0] == spec:
            cluster = self._current[1]
            if cluster.alive():
                return cluster
            # A test broke a cluster it shares: say so, then serve a whole one.
            print(f"\nshared cluster {spec.name}: a raylet is gone; starting it again", file=sys.stderr)
        self.release()
        cluster = start_cluster(self._base / f"{spec.name}-{len(self.starts)}", spec)
        self._current = (spec, cluster)
        self.starts.append(spec.name)
        return cluster

    def release(self) -> None:
        """Stop the current shared cluster, if any."""
        if self._current is None:
            return
        _, cluster = self._current
        self._current = None
        proc = cluster.stop()
        if proc.returncode != 0:
            raise RuntimeError(f"stopping a shared cluster failed ({proc.returncode}): {proc.stderr[-2000:]}")


# The session's pool, while the `shared_clusters` fixture is alive (a hook
# releases it before a test that starts a cluster of its own).
POOL: SharedClusters | None = None
# Every shared cluster the session started, in order (printed at the end).
STARTED: list[str] = []


def order(keys: Sequence[Hashable | None]) -> list[int]:
    """Positions of the tests in the order to run them: each group (tests
    sharing one cluster; `None`, tests sharing none) together, groups in the
    order their first test came, tests within a group in their given order.
    A permutation of `range(len(keys))`."""
    groups: dict[Hashable | None, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    return [i for members in groups.values() for i in members]


# Seconds each Ray-tier module took in a CI run on two cores with two shards
# (its tests, their cluster starts included; a shared cluster's start counts
# in the module whose test needed it first), to balance `shard`; a module not
# listed counts UNLISTED_S. Only the balance depends on these: every module
# runs either way.
MODULE_SECONDS: Mapping[str, float] = {
    "tests/integration/test_train.py": 361,
    "tests/integration/test_health.py": 346,
    "tests/integration/test_health_crashes.py": 291,
    "tests/integration/test_repartition.py": 262,
    "tests/integration/test_health_proof.py": 257,
    "tests/integration/test_train_context.py": 232,
    "tests/integration/test_repartition_crashes.py": 227,
    "tests/integration/test_serve_continuity.py": 219,
    "tests/integration/test_torchneuron.py": 174,
    "tests/integration/test_lifecycle.py": 173,
    "tests/integration/test_jobs.py": 168,
    "tests/integration/test_health_durable.py": 139,
    "tests/integration/test_launcher.py": 138,
    "tests/multihost/test_cluster.py": 136,
    "tests/integration/test_host_parity.py": 108,
    "tests/integration/test_prometheus.py": 80,
    "tests/integration/test_head_share.py": 74,
    "tests/integration/test_metrics.py": 60,
    "tests/integration/test_health_seen.py": 58,
    "tests/integration/test_serve.py": 57,
    "tests/integration/test_honest_types.py": 42,
    "tests/integration/test_auth.py": 27,
    "tests/multihost/test_hosts.py": 25,
    "tests/integration/test_benchmarks.py": 25,
    "tests/integration/test_trainium3.py": 18,
    "tests/integration/test_init.py": 14,
    "tests/integration/test_task_hooks.py": 13,
}
UNLISTED_S = 60.0


def shard(modules: Sequence[str], count: int) -> dict[str, int]:
    """Each module's shard, 0 to `count - 1`: the longest first, each to the
    shard with the fewest seconds so far (ties to the lowest), so the shards
    end close together. Depends only on the set of modules, never their order,
    so every shard's run computes the same split."""
    load = [0.0] * count
    placed: dict[str, int] = {}
    for module in sorted(set(modules), key=lambda m: (-MODULE_SECONDS.get(m, UNLISTED_S), m)):
        k = min(range(count), key=lambda i: (load[i], i))
        placed[module] = k
        load[k] += MODULE_SECONDS.get(module, UNLISTED_S)
    return placed
