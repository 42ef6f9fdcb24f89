"""The launch server forks launchers that behave as spawned ones: a session
of their own, their output to their log, the launch's environment, their
result and leader files written, their exit said; a launch whose
import-time environment differs from the server's is not forked.

The launches here run Ray's own `ray --version` (no raylet starts): the
launcher then reports that `ray start` created no node, through the whole
path a real launch takes."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ray_accel.cluster import launcher
from ray_accel.cluster.launch_server import ForkedLauncher, LaunchServer
from ray_accel.cluster.launcher import Launch, Launches
from ray_accel.cluster.raylet import leader_path
from ray_accel.core.files import open_for_write
from tests.cli_process import repo_pythonpath


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAYACCEL_", "RAY_"))}
    return {**env, "PYTHONPATH": repo_pythonpath()}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LaunchServer]:
    server = LaunchServer(base_env(), tmp_path / "server.log")
    yield server
    server.close()


def test_a_forked_launcher_runs_the_launch_in_its_own_session_and_environment(
    server: LaunchServer, tmp_path: Path
) -> None:
    launch = Launch(name="p0", args=["--version"], env={**base_env(), "MARK": "p0"}, log_dir=tmp_path, timeout_s=60)
    launch.begin(server)
    assert launch.proc is not None and launch.proc.pid != server.proc.pid
    assert os.getsid(launch.proc.pid) == launch.proc.pid, "a session of its own"
    report = launch.wait(threading.Event())
    assert launch.proc.poll() == 1, "the launcher's exit code, as the server saw it"
    assert not report.ok and "ray start created no node" in (report.error or "")
    assert "version" in launch.log_path.read_text(), "Ray's output went to the launch's log"
    leader = json.loads(Path(leader_path(str(launch.result_path))).read_text())
    assert leader["pid"] == launch.proc.pid == launch.leader.pid  # type: ignore[union-attr]


def test_the_launch_sees_its_own_environment_not_the_servers(server: LaunchServer, tmp_path: Path) -> None:
    # The launcher's `ray --version` cannot show its environment; a forked
    # child that fails its arguments prints them with the usage line, and the
    # exit code says it ran `main`: 2.
    log = open_for_write(tmp_path / "bad.log")
    try:
        forked = server.fork(["no-separator"], {**base_env(), "MARK": "mine"}, log)
    finally:
        os.close(log)
    assert forked is not None
    assert forked.wait(60) == 2
    assert "usage" in (tmp_path / "bad.log").read_text().lower()


def test_a_launch_whose_import_time_environment_differs_is_not_forked(server: LaunchServer) -> None:
    assert server.forks({**base_env(), "RAYACCEL_PARTITION": "p1", "NEURON_RT_VISIBLE_CORES": "0-7"})
    assert not server.forks({**base_env(), "RAY_DEDUP_LOGS": "0"})
    assert not server.forks({**base_env(), "PYTHONPATH": "/elsewhere"})


def test_a_closed_server_exits_and_forks_nothing(server: LaunchServer) -> None:
    server.close()
    assert server.proc.poll() is not None, "the server exited"
    assert not server.forks(base_env())


def test_launches_fork_every_launcher_from_one_server_and_close_it(tmp_path: Path) -> None:
    launches = Launches(log_dir=tmp_path, timeout_s=60, forked=True)
    reports = launches.run_all([(f"p{i}", ["--version"], base_env()) for i in range(3)])
    server = launches._server
    assert server is not None
    pids = {launch.proc.pid for launch in launches.launches if launch.proc is not None}
    assert len(pids) == 3 and all(not r.ok for r in reports)
    assert all(isinstance(launch.proc, ForkedLauncher) for launch in launches.launches)
    launches.close()
    assert server.proc.poll() is not None
    assert (tmp_path / "launch-server.log").exists()


def test_a_server_that_cannot_start_leaves_the_launches_spawned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_server(*_: object) -> LaunchServer:
        raise OSError("no server here")

    monkeypatch.setattr(launcher, "LaunchServer", no_server)
    launches = Launches(log_dir=tmp_path, timeout_s=60, forked=True)
    (report,) = launches.run_all([("p0", ["--version"], base_env())])
    assert isinstance(launches.launches[0].proc, subprocess.Popen)
    assert not report.ok and "ray start created no node" in (report.error or "")
