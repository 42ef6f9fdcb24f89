"""A real Prometheus for tests: Debian's `prometheus` as a foreground child process.

It scrapes the targets Ray lists in its service-discovery file, every second,
keeps its data in a temporary directory, listens on a free port of
127.0.0.1 (or the address given), and is stopped by its PID. Queries go through
the HTTP API, as Grafana's would.

Ray 2.60 writes the file `prom_metrics_service_discovery.json`
(ray/_private/ray_constants.py, PROMETHEUS_SERVICE_DISCOVERY_FILE) into the
head's session directory every 5 s, from the dashboard's ReportHead
(PrometheusServiceDiscoveryWriter in ray/_private/metrics_agent.py), plus a
symlink to it in the temp dir. Its content is one target group, in the
file_sd format (https://prometheus.io/docs/guides/file-sd/):
`[{"labels": {"job": "ray"}, "targets": ["<node ip>:<metrics_export_port>" for
every alive node, "<autoscaler metrics>", "<dashboard metrics>"]}]`. Without
the dashboard (`ray start --include-dashboard false`, or `ray-accel start
--no-dashboard`; ray-accel runs it by default) nothing writes the file.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

# What CI runs (as root, on a fresh Debian machine) before `make test`.
INSTALL_COMMAND = (
    "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus"
)
SD_FILE_NAME = "prom_metrics_service_discovery.json"
SD_FILE_HINT = (
    "Ray writes it only from the head's dashboard (ReportHead); start the head with `--include-dashboard true` "
    "(ray-accel start runs it unless given --no-dashboard or `-- --include-dashboard false`)"
)
Series = tuple[dict[str, str], float]


class PrometheusMissing(RuntimeError):
    """No `prometheus` binary on PATH."""


class PromQueryError(RuntimeError):
    """The HTTP API answered with an error (bad PromQL, timeout)."""


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        raise PrometheusMissing(f"no `prometheus` binary on PATH; install Debian's package as root: {INSTALL_COMMAND}")
    return found


def render_config(sd_file: Path, scrape_interval_s: float) -> str:
    """prometheus.yml as JSON (a subset of YAML): one job over Ray's SD file.

    The job name is Ray's own (templates.py PROMETHEUS_YML_TEMPLATE); the SD
    file's own `job` label wins anyway.
    """
    interval = f"{int(scrape_interval_s * 1000)}ms"
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "scrape_configs": [
            {
                "job_name": "ray",
                # The file is rewritten atomically (os.replace); re-reading it on
                # a short period as well as on inotify keeps new raylets quick.
                "file_sd_configs": [{"files": [str(sd_file)], "refresh_interval": "1s"}],
            }
        ],
    }
    return json.dumps(config, indent=2)


def sd_targets(text: str) -> list[str]:
    """Targets of a file_sd JSON document, in order, once each."""
    groups = json.loads(text)
    if not isinstance(groups, list):
        raise ValueError(f"service-discovery file is not a list of target groups: {text[:200]!r}")
    out: list[str] = []
    for g in groups:
        for t in g.get("targets", []):
            if t not in out:
                out.append(t)
    return out


def parse_query_result(body: Mapping[str, Any]) -> list[Series]:
    """(labels, value) per series of an /api/v1/query answer; a range vector gives its last sample."""
    if body.get("status") != "success":
        raise PromQueryError(f"{body.get('errorType', 'error')}: {body.get('error', body)}")
    data = body["data"]
    kind, result = data["resultType"], data["result"]
    if kind == "vector":
        return [(dict(r["metric"]), float(r["value"][1])) for r in result]
    if kind == "matrix":
        return [(dict(r["metric"]), float(r["values"][-1][1])) for r in result if r["values"]]
    if kind == "scalar":
        return [({}, float(result[1]))]
    raise PromQueryError(f"result type {kind!r} is not a number or a set of series: {result!r}")


def session_dir_of(raylet_pid: int) -> Path:
    """The session directory a raylet runs in (its `--session_dir=` flag,
    ray/_private/services.py start_raylet), so the SD file read is this
    cluster's and never a stale one from an earlier session in the same temp dir."""
    for arg in psutil.Process(raylet_pid).cmdline():
        if arg.startswith("--session_dir="):
            return Path(arg.split("=", 1)[1])
    raise RuntimeError(f"process {raylet_pid} has no --session_dir flag; is it a raylet?")


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class Prometheus:
    url: str
    pid: int
    sd_file: Path
    log_file: Path

    def api(self, path: str, params: Mapping[str, str] | None = None, timeout_s: float = 10.0) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=timeout_s) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            # Bad PromQL is a 400 with a JSON error body.
            return json.loads(e.read() or b"{}") | {"status": "error", "http": e.code}

    def query(self, promql: str) -> list[Series]:
        return parse_query_result(self.api("/api/v1/query", {"query": promql}))

    def active_targets(self) -> dict[str, dict[str, Any]]:
        """Scrape address -> target, as Prometheus sees them now."""
        body = self.api("/api/v1/targets", {"state": "active"})
        return {t["discoveredLabels"]["__address__"]: t for t in body["data"]["activeTargets"]}

    def wait_for_targets(self, required: Collection[str] = (), timeout_s: float = 60.0) -> list[str]:
        """Every target of the SD file (and each of `required`, which must be in
        it) is up; returns the targets. Fails naming the targets that are not."""
        deadline = time.monotonic() + timeout_s
        while True:
            problems = self._target_problems(required)
            if not problems:
                return sd_targets(self.sd_file.read_text())
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"Prometheus targets not up after {timeout_s:.0f} s: " + "; ".join(problems) + f" ({self.url})"
                )
            time.sleep(0.5)

    def _target_problems(self, required: Collection[str]) -> list[str]:
        try:
            listed = sd_targets(self.sd_file.read_text())
        except FileNotFoundError:
            return [f"no service-discovery file {self.sd_file}: {SD_FILE_HINT}"]
        except ValueError as e:
            return [f"{self.sd_file}: {e}"]
        problems = [f"{t} is not in {self.sd_file} ({listed})" for t in required if t not in listed]
        if not listed:
            problems.append(f"{self.sd_file} lists no targets")
        active = self.active_targets()
        for t in listed:
            target = active.get(t)
            if target is None:
                problems.append(f"{t} not discovered yet")
            elif target["health"] != "up":
                problems.append(f"{t} is {target['health']}: {target.get('lastError') or 'not scraped yet'}")
        return problems

    def wait_for_series(self, promql: str, timeout_s: float = 30.0) -> list[Series]:
        """The query's answer once it has at least one series (the last, empty answer on timeout)."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = self.query(promql)
            if found or time.monotonic() > deadline:
                return found
            time.sleep(0.5)


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log_file: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"prometheus exited with {proc.returncode}: {log_file.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"prometheus not ready at {url} after {timeout_s:.0f} s: {log_file.read_text()[-2000:]}")
        time.sleep(0.2)


def _stop(pid: int, proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    os.kill(pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=10)


@contextlib.contextmanager
def running_prometheus(
    sd_file: Path,
    scrape_interval_s: float = 1.0,
    listen_host: str = "127.0.0.1",
    command_prefix: Sequence[str] = (),
    start_timeout_s: float = 30.0,
) -> Iterator[Prometheus]:
    """Start Prometheus on `sd_file`; stop it by PID and remove its directory on exit.

    `command_prefix` runs it elsewhere, for example `("ip", "netns", "exec",
    "hostA")` (which execs, so the PID is Prometheus's own); `listen_host` must
    then be an address of that namespace that the caller can reach.
    """
    binary = prometheus_binary()
    workdir = Path(tempfile.mkdtemp(prefix="prometheus-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        config = workdir / "prometheus.yml"
        config.write_text(render_config(sd_file, scrape_interval_s))
        log_file = workdir / "prometheus.log"
        for attempt in range(3):
            port = _free_port(listen_host)
            url = f"http://{listen_host}:{port}"
            with log_file.open("wb") as log:
                proc = subprocess.Popen(
                    [
                        *command_prefix,
                        binary,
                        f"--config.file={config}",
                        f"--storage.tsdb.path={workdir / 'data'}",
                        f"--web.listen-address={listen_host}:{port}",
                        "--storage.tsdb.retention.time=1h",
                        "--log.level=warn",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            try:
                _wait_ready(proc, url, log_file, start_timeout_s)
                break
            except RuntimeError:
                # The port was free when picked and may not be by now; try another.
                if proc.poll() is None or attempt == 2 or "address already in use" not in log_file.read_text():
                    raise
        assert proc is not None
        yield Prometheus(url=url, pid=proc.pid, sd_file=sd_file, log_file=log_file)
    finally:
        if proc is not None:
            _stop(proc.pid, proc)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def prometheus(ray_sd_file: Path, ray_metrics_targets: Collection[str]) -> Iterator[Prometheus]:
    """A Prometheus over the cluster of the module's `ray_sd_file` fixture,
    every target up and each of `ray_metrics_targets` among them.

    A missing binary fails the test with the install command; it never skips.
    """
    try:
        prometheus_binary()
    except PrometheusMissing as e:
        pytest.fail(str(e))
    with running_prometheus(ray_sd_file) as prom:
        prom.wait_for_targets(required=ray_metrics_targets, timeout_s=90)
        yield prom
