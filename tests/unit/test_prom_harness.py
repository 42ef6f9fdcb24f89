"""The Prometheus test harness (tests/prom.py) against a real Prometheus and a plain HTTP endpoint, no Ray."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.prom import (
    INSTALL_COMMAND,
    Prometheus,
    PrometheusMissing,
    PromQueryError,
    parse_query_result,
    prometheus_binary,
    render_config,
    running_prometheus,
    sd_targets,
)

# Prometheus text exposition format 0.0.4, as Ray's metrics endpoint serves it.
EXPOSITION = (
    "# HELP ray_accel_device_utilization Device utilisation, 0..1\n"
    "# TYPE ray_accel_device_utilization gauge\n"
    'ray_accel_device_utilization{device_id="neuron:0",partition="p0"} 0.25\n'
    'ray_accel_device_utilization{device_id="neuron:1",partition="p0"} 0.5\n'
)


class _Metrics(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = EXPOSITION.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _closed_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _sd(tmp_path: Path, *targets: str) -> Path:
    path = tmp_path / "prom_metrics_service_discovery.json"
    path.write_text(json.dumps([{"labels": {"job": "ray"}, "targets": list(targets)}]))
    return path


def test_missing_binary_names_the_install_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PrometheusMissing, match="apt-get install") as e:
        prometheus_binary()
    assert INSTALL_COMMAND in str(e.value)


def test_installed() -> None:
    """CI must install Debian's prometheus; this fails (never skips) when it did not."""
    try:
        prometheus_binary()
    except PrometheusMissing as e:
        pytest.fail(str(e))


def test_config_is_valid_for_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail(f"no promtool (Debian's prometheus package has it): {INSTALL_COMMAND}")
    config = tmp_path / "prometheus.yml"
    sd = _sd(tmp_path, "127.0.0.1:1")
    config.write_text(render_config(sd, 1.0))
    proc = subprocess.run([promtool, "check", "config", str(config)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    parsed = json.loads(config.read_text())
    assert parsed["global"]["scrape_interval"] == "1000ms"
    assert parsed["scrape_configs"][0]["file_sd_configs"][0]["files"] == [str(sd)]


def test_query_results_become_labels_and_values() -> None:
    vector = {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": {"a": "1"}, "value": [1.0, "0.5"]}]},
    }
    assert parse_query_result(vector) == [({"a": "1"}, 0.5)]
    matrix = {
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[1, "1"], [2, "3"]]}]},
    }
    assert parse_query_result(matrix) == [({}, 3.0)]
    assert parse_query_result({"status": "success", "data": {"resultType": "scalar", "result": [1, "4"]}}) == [
        ({}, 4.0)
    ]
    with pytest.raises(PromQueryError, match="bad_data: parse error"):
        parse_query_result({"status": "error", "errorType": "bad_data", "error": "parse error"})
    with pytest.raises(PromQueryError, match="'string'"):
        parse_query_result({"status": "success", "data": {"resultType": "string", "result": [1, "x"]}})


ADDRESSES = st.builds(lambda a, p: f"10.0.0.{a}:{p}", st.integers(1, 254), st.integers(1, 65535))


@given(st.lists(st.lists(ADDRESSES, max_size=5), max_size=4))
def test_sd_targets_lists_each_target_once_in_order(groups: list[list[str]]) -> None:
    text = json.dumps([{"labels": {"job": "ray"}, "targets": g} for g in groups])
    flat = [t for g in groups for t in g]
    assert sd_targets(text) == list(dict.fromkeys(flat))


def test_sd_file_that_is_not_a_list_is_refused() -> None:
    with pytest.raises(ValueError, match="not a list of target groups"):
        sd_targets('{"targets": []}')


def test_scrapes_the_sd_targets_and_queries_them(tmp_path: Path, endpoint: str) -> None:
    with running_prometheus(_sd(tmp_path, endpoint)) as prom:
        assert psutil.Process(prom.pid).name() == "prometheus"
        workdir = Path(prom.log_file).parent
        assert prom.wait_for_targets(required=[endpoint], timeout_s=30) == [endpoint]
        series = prom.wait_for_series("ray_accel_device_utilization", timeout_s=15)
        assert sorted((labels["device_id"], labels["instance"], value) for labels, value in series) == [
            ("neuron:0", endpoint, 0.25),
            ("neuron:1", endpoint, 0.5),
        ]
        with pytest.raises(PromQueryError, match="parse error"):
            prom.query("sum(")
        pid = prom.pid
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not workdir.exists(), "its data directory is removed"


def test_names_the_targets_that_are_down(tmp_path: Path, endpoint: str) -> None:
    dead = _closed_port()
    with running_prometheus(_sd(tmp_path, endpoint, dead)) as prom:
        with pytest.raises(AssertionError, match=rf"{dead} is down: .*connection refused") as e:
            # Prometheus applies discovered targets on a 5 s tick (scrape manager reload).
            prom.wait_for_targets(timeout_s=12)
        assert endpoint not in str(e.value)


def test_names_a_required_target_missing_from_the_sd_file(tmp_path: Path, endpoint: str) -> None:
    with running_prometheus(_sd(tmp_path, endpoint)) as prom:
        with pytest.raises(AssertionError, match=r"127\.0\.0\.1:1 is not in"):
            prom.wait_for_targets(required=["127.0.0.1:1"], timeout_s=3)


def test_a_missing_sd_file_says_what_writes_it(tmp_path: Path) -> None:
    with running_prometheus(tmp_path / "prom_metrics_service_discovery.json") as prom:
        with pytest.raises(AssertionError, match="--include-dashboard true"):
            prom.wait_for_targets(timeout_s=1)


def test_wait_for_series_gives_up_with_the_empty_answer(tmp_path: Path) -> None:
    with running_prometheus(_sd(tmp_path)) as prom:
        assert isinstance(prom, Prometheus)
        assert prom.wait_for_series("nothing_here", timeout_s=1) == []
