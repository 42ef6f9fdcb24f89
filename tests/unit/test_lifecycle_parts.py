"""The parts of the host lifecycle that need no Ray: port sizing, what a
command line runs, the launcher's result as untrusted input, the lock, and
signals turned into a clean interrupt."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from ray_accel.cluster import statedir
from ray_accel.cluster.host import MIN_WORKER_PORTS, plan_ports, raylet_ports, worker_port_count, worker_ports
from ray_accel.cluster.launcher import Launch
from ray_accel.cluster.procs import identity, is_ray_process
from ray_accel.cluster.raylet import port_args
from ray_accel.cluster.signals import Interrupted, interruptible
from tests.cli_process import run_cli
from tests.planning import plan_for
from tests.tagged import new_tag, tagged

# ------------------------------------------------------------------ ports


def test_worker_ports_grow_with_cpus_and_units_from_a_floor() -> None:
    assert worker_port_count(1, 2) == MIN_WORKER_PORTS, "a small raylet keeps the old 184"
    assert worker_port_count(64, 16) == 2 * 64 + 4 * 16 + 64
    assert worker_port_count(192, 4) > worker_port_count(96, 4) > MIN_WORKER_PORTS
    assert worker_port_count(1e9, 10**6) == 20000, "bounded"


def test_worker_ports_follow_the_partitions_share_or_the_users_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray_accel_mock.spec import load_spec

    plan = plan_for(load_spec("trn1.32xlarge").devices, "auto-split", 2)
    monkeypatch.setattr(os, "cpu_count", lambda: 128)
    units = [len(p.core_ids) for p in plan]
    assert worker_ports(units, None, None) == [2 * 64 + 4 * 16 + 64] * 2
    assert worker_ports(units, 500, None) == [2 * 500 + 4 * 16 + 64] * 2
    assert worker_ports(units, "8", 300) == [300, 300], "--max-workers wins"


def test_only_a_head_binds_the_client_server_and_dashboard_ports() -> None:
    head, worker = plan_ports([184, 500], None, client_server=True)
    head_args = port_args(head, head=True)
    assert "--ray-client-server-port" in head_args and "--dashboard-port" in head_args
    port = head_args[head_args.index("--ray-client-server-port") + 1]
    assert int(port) == head.named["ray_client_server_port"] != 10001
    worker_args = port_args(worker, head=False)
    assert "--ray-client-server-port" not in worker_args and "--dashboard-port" not in worker_args
    assert worker_args[-4:] == [
        "--min-worker-port",
        str(worker.min_worker_port),
        "--max-worker-port",
        str(worker.max_worker_port),
    ]
    assert worker.max_worker_port - worker.min_worker_port + 1 == 500
    plain = raylet_ports(30000, 184, client_server=False)
    assert "--ray-client-server-port" not in port_args(plain, head=True), "no client dependencies: no port"


# ------------------------------------------------------------------ identity


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/v/ray/core/src/ray/raylet/raylet", "--node_manager_port=1"], "/v/ray/core/src/ray/raylet/raylet"),
        (["/v/bin/python3.11", "-u", "/v/ray/_private/log_monitor.py", "--x"], "/v/ray/_private/log_monitor.py"),
        (["/v/bin/python3.11", "-m", "ray.util.client.server", "--port=1"], "-m ray.util.client.server"),
        (["python3", "-mray.util.client.server"], "-m ray.util.client.server"),
        (["python", "-W", "ignore", "/v/ray/dashboard/dashboard.py"], "/v/ray/dashboard/dashboard.py"),
        (["python", "-c", "import os"], "-c"),
        (["python"], "python"),
        (["sleep", "600"], "sleep"),
        ([], ""),
    ],
)
def test_identity(argv: list[str], expected: str) -> None:
    assert identity(argv) == expected


def test_what_counts_as_a_ray_process() -> None:
    import ray

    ray_dir = os.path.dirname(ray.__file__)
    assert is_ray_process("raylet", f"{ray_dir}/core/src/ray/raylet/raylet")
    assert is_ray_process("raylet", "/elsewhere/ray/core/src/ray/raylet/raylet"), "a Ray install elsewhere"
    assert is_ray_process("ray_client_server", "-m ray.util.client.server")
    assert is_ray_process("new_kind", f"{ray_dir}/_private/something_new.py"), "a kind of a newer Ray, in its package"
    assert is_ray_process("new_kind", "-m ray.something")
    for kind, ident in [
        ("raylet", "/usr/bin/sleep"),
        ("raylet", "sleep"),
        ("new_kind", "/usr/bin/python3"),
        ("new_kind", "-m http.server"),
        ("new_kind", f"{ray_dir}/../evil.py"),
        ("ray_client_server", "x-m ray.util.client.server"),
    ]:
        assert not is_ray_process(kind, ident), (kind, ident)


# ------------------------------------------------------------------ the launcher's result


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "unreadable launcher result"),
        (b"not json", "unreadable launcher result"),
        (b"[]", "not an object"),
        (b'{"ok": true}', "names no node"),
        (b'{"ok": true, "processes": [[1, 2]], "node_id": "a", "gcs_address": "h:1", "node_ip": "h"}', "processes[0]"),
        (b'{"ok": "yes", "node_id": "a", "gcs_address": "h:1", "node_ip": "h"}', "reported a failure"),
        (b'{"ok": true, "created": NaN}', "unreadable launcher result"),
        (b"[" * 100_000, "unreadable launcher result"),
        (b'{"ok": false, "error": "ray start exited with 1"}', "ray start exited with 1"),
    ],
)
def test_a_bad_launcher_result_is_a_failed_launch_never_a_crash(tmp_path: Path, content: bytes, needle: str) -> None:
    launch = Launch(name="p0", args=[], env={}, log_dir=tmp_path, timeout_s=1)
    launch.result_path.write_bytes(content)
    launch.log_path.write_text("line one\n\nlast line\n")
    result = launch._read_result(None)
    assert not result.ok and result.error is not None
    assert needle in result.error and "last line" in result.error


def test_a_good_launcher_result(tmp_path: Path) -> None:
    launch = Launch(name="p0", args=[], env={}, log_dir=tmp_path, timeout_s=1)
    proc = {"kind": "raylet", "pid": 4242, "start_ticks": 7, "identity": "/v/ray/core/src/ray/raylet/raylet"}
    launch.result_path.write_text(
        json.dumps({"ok": True, "processes": [proc], "node_id": "ab", "gcs_address": "h:1", "node_ip": "h"})
    )
    result = launch._read_result(None)
    assert result.ok and result.processes[0].pid == 4242 and result.gcs_address == "h:1"
    assert not launch._read_result("interrupted").ok, "a result that came too late does not count"


def test_a_fifo_where_the_result_should_be(tmp_path: Path) -> None:
    launch = Launch(name="p0", args=[], env={}, log_dir=tmp_path, timeout_s=1)
    os.mkfifo(launch.result_path)
    result = launch._read_result(None)
    assert not result.ok and "FIFO" in str(result.error)


def test_a_fifo_where_a_launch_log_goes_stops_start_before_any_launch(tmp_path: Path) -> None:
    tag = new_tag()
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    os.mkfifo(state_dir / "p0.log")
    env = {"RAYACCEL_MOCK": "trn1.32xlarge", "RAYACCEL_STATE_DIR": str(state_dir), "HOME": str(tmp_path), **tag}
    try:
        proc = run_cli("start", "--head", "--partitions", "2", "--no-metrics", env=env, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert "p0.log" in proc.stderr and "Traceback" not in proc.stderr
        assert tagged(tag) == {}, "the start launched something"
        assert not (state_dir / "host.json").exists()
    finally:
        # What a start that got past the check began (a CLI killed at the
        # timeout undoes nothing): this test's processes only, by PID.
        for pid in tagged(tag):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


# ------------------------------------------------------------------ the lock and signals


def test_the_lock_is_exclusive_and_released_on_any_exit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYACCEL_STATE_DIR", str(tmp_path / "state"))
    place = statedir.place_for("10.0.0.1")
    with pytest.raises(RuntimeError), statedir.host_lock("stop", place):
        with pytest.raises(statedir.LockError, match=r"lock .*/state/lock is held \(stop, pid"):
            with statedir.host_lock("start", place):
                pass
        raise RuntimeError("boom")
    with statedir.host_lock("start", place):  # released by the exception
        pass
    assert oct((tmp_path / "state" / "lock").stat().st_mode & 0o777) == oct(0o600)


def test_sigterm_while_starting_is_an_interrupt_and_the_handler_is_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted, match="SIGTERM"), interruptible():
        os.kill(os.getpid(), signal.SIGTERM)
        threading.Event().wait(5)
    assert signal.getsignal(signal.SIGTERM) == before


def test_an_old_record_in_the_old_default_place_is_pointed_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RAYACCEL_STATE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ray-accel").mkdir()
    (tmp_path / ".ray-accel" / "node.json").write_text("{}")
    assert statedir.locate().place is None
    assert "record of an older ray-accel" in capsys.readouterr().err


def test_a_client_port_only_where_ray_would_start_a_client_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray 2.60 starts the client server (default 10001) when `grpc` imports,
    and refuses any client port when it does not (a minimal `pip install ray`
    has no grpcio): ray-accel asks the same question."""
    from ray._private.parameter import RayParams
    from ray._private.utils import get_ray_client_dependency_error

    from ray_accel.cluster.start import client_server_available

    assert client_server_available() == (get_ray_client_dependency_error() is None)
    monkeypatch.setitem(sys.modules, "grpc", None)  # as if grpcio were not installed
    assert get_ray_client_dependency_error() is not None
    assert not client_server_available()
    with pytest.raises(ValueError, match=r"ray\[client\]"):
        RayParams(ray_client_server_port=30001)
