"""The single-host lifecycle with a real Ray:
a start interrupted, timed out or racing another leaves nothing behind;
`start --block` stops what it started however it ends.

Every command runs with a tag of its own in its environment (`tests.tagged`),
so "nothing left behind" means: no live process carrying that tag, whatever
other sessions on the machine run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli_process import CLI, repo_pythonpath, run_cli, sigint_as_default
from tests.integration.cluster_harness import free_port
from tests.tagged import new_tag, tagged, wait_none_tagged

pytestmark = pytest.mark.ray


def cli_env(state: Path, tag: dict[str, str]) -> dict[str, str]:
    return {
        "RAYACCEL_MOCK": "trn1.32xlarge",
        "RAYACCEL_STATE_DIR": str(state),
        "PYTHONPATH": repo_pythonpath(),
        **tag,
    }


# Background commands of the running test: the `cleanup` fixture ends any still running.
RUNNING: list[subprocess.Popen[str]] = []


class Background:
    """A `ray-accel` command running in the background, its output collected as it comes."""

    def __init__(self, *args: str, env: dict[str, str]) -> None:
        full = {k: v for k, v in os.environ.items() if not k.startswith("RAYACCEL_")}
        full.update(env)
        self.proc = subprocess.Popen(
            [CLI, *args],
            env=full,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=sigint_as_default,
        )
        RUNNING.append(self.proc)
        self.out: list[str] = []
        self.err: list[str] = []
        for stream, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    @staticmethod
    def _pump(stream: object, sink: list[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            sink.append(line)

    @property
    def stdout(self) -> str:
        return "".join(self.out)

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    def wait_for(self, ready: Callable[[], bool], timeout_s: float = 240, what: str = "") -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if self.proc.poll() is not None:
                time.sleep(0.3)  # let the pumps drain
                pytest.fail(f"exited {self.proc.returncode} before {what}: {self.stderr[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"not {what} within {timeout_s}s: {self.stderr[-3000:]}")
            time.sleep(0.1)

    def finish(self, timeout_s: float = 120) -> int:
        code = self.proc.wait(timeout=timeout_s)
        time.sleep(0.3)
        return code


@pytest.fixture
def cleanup() -> Iterator[list[dict[str, str]]]:
    """Environments to `ray-accel stop` at the end, whatever happened (an
    interrupted run too): first each background command still running gets
    SIGTERM, on which a start stops what it began, even mid-launch."""
    envs: list[dict[str, str]] = []
    yield envs
    while RUNNING:
        proc = RUNNING.pop()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    for env in envs:
        run_cli("stop", "--grace", "2", env=env)


def names(tag: dict[str, str]) -> set[str]:
    return set(tagged(tag).values())


def record_of(env: dict[str, str]) -> dict[str, object]:
    data: dict[str, object] = json.loads((Path(env["RAYACCEL_STATE_DIR"]) / "host.json").read_text())
    return data


def cmdline(pid: int) -> list[str]:
    return open(f"/proc/{pid}/cmdline", "rb").read().decode().split("\0")[:-1]


# ------------------------------------------------------------ Ctrl-C mid-start


@pytest.mark.parametrize(
    ("phase", "sig"),
    [("head", signal.SIGINT), ("partitions", signal.SIGINT), ("partitions", signal.SIGTERM)],
    ids=["head-SIGINT", "partitions-SIGINT", "partitions-SIGTERM"],
)
def test_a_signal_during_start_leaves_nothing(
    phase: str, sig: signal.Signals, tmp_path: Path, cleanup: list[dict[str, str]]
) -> None:
    tag = new_tag()
    env = cli_env(tmp_path / "state", tag)
    cleanup.append(env)
    start = Background(
        "start", "--head", "--partitions", "4", "--port", str(free_port()), "--no-metrics", "--no-dashboard", env=env
    )
    if phase == "head":
        # The head's launch is under way: its GCS runs, its launcher has not reported.
        start.wait_for(lambda: "gcs_server" in names(tag), what="the head's GCS is up")
    else:
        # The head is up and the other partitions' launches run in parallel.
        start.wait_for(lambda: list(names_list(tag)).count("raylet") >= 2, what="a second raylet is up")
    seen = names(tag)
    os.kill(start.proc.pid, sig)
    code = start.finish()
    assert code == 130, start.stderr[-3000:]
    assert "start interrupted: stopped the" in start.stderr
    assert "Traceback" not in start.stderr
    left = wait_none_tagged(tag)
    assert left == {}, f"left behind after {sig.name} (had {sorted(seen)}): {left}"
    assert not (tmp_path / "state" / "host.json").exists()


def names_list(tag: dict[str, str]) -> list[str]:
    return list(tagged(tag).values())


def test_a_launch_timeout_stops_every_process_the_launch_began(tmp_path: Path, cleanup: list[dict[str, str]]) -> None:
    """A head whose GCS hangs (stopped with SIGSTOP as soon as it appears) never
    reports; the launch is killed at --timeout, the hung GCS with it. Hanging
    it, not racing a short timeout, keeps this true on a machine of any speed."""
    tag = new_tag()
    env = cli_env(tmp_path / "state", tag)
    cleanup.append(env)
    start = Background("start", "--head", "--partitions", "2", "--port", str(free_port()), "--timeout", "4", env=env)
    hung: list[int] = []

    def gcs_hung() -> bool:
        hung.extend(pid for pid, name in tagged(tag).items() if name == "gcs_server")
        for pid in hung:
            os.kill(pid, signal.SIGSTOP)
        return bool(hung)

    start.wait_for(gcs_hung, timeout_s=60, what="the head's GCS is up")
    start.finish()
    assert start.proc.returncode == 1, start.stderr[-3000:]
    assert "no result within 4s" in start.stderr
    assert wait_none_tagged(tag) == {}, f"the hung GCS {hung} or its launch was left behind"
    assert not (tmp_path / "state" / "host.json").exists()


# ------------------------------------------------------------ two starts at once


def test_concurrent_starts_one_wins_and_a_second_head_has_its_own_client_port(
    tmp_path: Path, cleanup: list[dict[str, str]]
) -> None:
    state = tmp_path / "state"
    tags = [new_tag(), new_tag()]
    envs = [cli_env(state, t) for t in tags]
    cleanup.append(envs[0])
    starts = [
        Background(
            "start", "--head", "--partitions", "2", "--port", str(free_port()), "--no-metrics", "--no-dashboard", env=e
        )
        for e in envs
    ]
    codes = [s.finish(300) for s in starts]
    assert sorted(codes) == [0, 2], [s.stderr[-2000:] for s in starts]
    winner, loser = (0, 1) if codes[0] == 0 else (1, 0)
    assert f"lock {state / 'lock'} is held" in starts[loser].stderr, starts[loser].stderr
    assert tagged(tags[loser]) == {}, "the loser started nothing"
    status = json.loads(run_cli("status", "--json", env=envs[winner]).stdout)
    assert [p["alive"] for p in status["partitions"]] == [True, True]

    # A second head on the same host (its own state dir) does not collide on
    # Ray's default client server port 10001: each head binds its own.
    tag_b = new_tag()
    env_b = cli_env(tmp_path / "state-b", tag_b)
    cleanup.append(env_b)
    second = run_cli(
        "start", "--head", "--partitions", "1", "--port", str(free_port()), "--no-metrics", "--no-dashboard", env=env_b
    )
    assert second.returncode == 0, second.stderr[-3000:]
    ports = []
    for env in (envs[winner], env_b):
        head: Any = record_of(env)["head_raylet"]
        port = head["ports"]["named"]["ray_client_server_port"]
        (client,) = [p for p in head["processes"] if p["kind"] == "ray_client_server"]
        assert f"--port={port}" in cmdline(client["pid"])
        ports.append(port)
    assert len(set(ports)) == 2 and 10001 not in ports

    for env, tag in ((envs[winner], tags[winner]), (env_b, tag_b)):
        assert run_cli("stop", "--grace", "2", env=env).returncode == 0
        assert wait_none_tagged(tag) == {}


# ------------------------------------------------------------ start --block


def blocked_start(tmp_path: Path, cleanup: list[dict[str, str]], *extra: str) -> tuple[Background, dict[str, str]]:
    tag = new_tag()
    env = cli_env(tmp_path / "state", tag)
    cleanup.append(env)
    start = Background(
        "start",
        "--head",
        "--partitions",
        "2",
        "--port",
        str(free_port()),
        "--no-metrics",
        "--no-dashboard",
        "--block",
        *extra,
        env=env,
    )
    start.wait_for(lambda: "blocking with p0, p1" in start.stderr, what="blocking")
    # stdout is flushed before "blocking" goes to stderr; each pipe has its own
    # reader thread here, so stdout's may land a moment later.
    start.wait_for(lambda: "cluster address" in start.stdout, timeout_s=10, what="the status printed before blocking")
    return start, env


def test_block_stops_everything_on_sigterm(tmp_path: Path, cleanup: list[dict[str, str]]) -> None:
    start, env = blocked_start(tmp_path, cleanup, "--max-workers", "300")
    tag = {"RAYACCEL_TEST_TAG": env["RAYACCEL_TEST_TAG"]}
    # Worker ports as sized: each raylet got exactly its recorded range, 300 wide.
    for part in record_of(env)["partitions"]:  # type: ignore[attr-defined]
        ports = part["ports"]
        assert ports["max_worker_port"] - ports["min_worker_port"] + 1 == 300
        (raylet,) = [p for p in part["processes"] if p["kind"] == "raylet"]
        argv = cmdline(raylet["pid"])
        assert f"--min_worker_port={ports['min_worker_port']}" in argv
        assert f"--max_worker_port={ports['max_worker_port']}" in argv
    assert run_cli("start", "--recover", env=env).stdout, "the lock is free while blocking"
    os.kill(start.proc.pid, signal.SIGTERM)
    assert start.finish() == 0, start.stderr[-3000:]
    assert "SIGTERM: stopping every partition" in start.stderr
    assert wait_none_tagged(tag) == {}
    assert not (tmp_path / "state" / "host.json").exists()


def test_block_ends_when_stop_runs_elsewhere(tmp_path: Path, cleanup: list[dict[str, str]]) -> None:
    start, env = blocked_start(tmp_path, cleanup)
    tag = {"RAYACCEL_TEST_TAG": env["RAYACCEL_TEST_TAG"]}
    stopped = run_cli("stop", "--grace", "2", env={k: v for k, v in env.items() if k != "RAYACCEL_TEST_TAG"})
    assert stopped.returncode == 0, stopped.stderr
    assert start.finish() == 0, start.stderr[-3000:]
    assert "stopped by `ray-accel stop`" in start.stderr
    assert wait_none_tagged(tag) == {}


def test_block_exits_1_and_stops_the_rest_when_a_partition_dies(tmp_path: Path, cleanup: list[dict[str, str]]) -> None:
    start, env = blocked_start(tmp_path, cleanup)
    tag = {"RAYACCEL_TEST_TAG": env["RAYACCEL_TEST_TAG"]}
    p1 = record_of(env)["partitions"][1]  # type: ignore[index]
    (raylet,) = [p for p in p1["processes"] if p["kind"] == "raylet"]
    os.kill(raylet["pid"], signal.SIGKILL)
    assert start.finish() == 1, start.stderr[-3000:]
    assert "p1: raylet" in start.stderr and "DIED" in start.stderr
    assert "partition p1 died: stopping every partition" in start.stderr
    assert wait_none_tagged(tag) == {}
    assert not (tmp_path / "state" / "host.json").exists()
