"""`ray-accel start` and `ray_accel.init` refusing what they cannot honour,
before anything starts: exit 2 (or the error) naming the value, no process
left, no state record, no Ray session. These never start Ray, so they run in
the pure tier, beside a Ray tier whose raylets come and go: "nothing started"
is checked by the test's own tag (`tests.tagged`), which every process the
command starts inherits, never by counting the host's raylets.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ray_accel.cluster.host import free_port
from tests.badinput import badinput
from tests.cli_process import repo_pythonpath
from tests.clirun import run_cli_here
from tests.tagged import new_tag, tagged


def start_env(tmp_path: Path, tag: dict[str, str], **extra: str) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {
        "RAYACCEL_MOCK": "trn1.32xlarge",
        "RAYACCEL_STATE_DIR": str(tmp_path / "state"),
        "HOME": str(home),
        **tag,
        **extra,
    }


def assert_refused(proc: subprocess.CompletedProcess[str], needle: str, tmp_path: Path, tag: dict[str, str]) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert needle in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert tagged(tag) == {}, "the refused start left a process"
    assert not list((tmp_path / "state").glob("*.json")), "no state record"


@badinput("launcher")
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--mode", "manual", "--manual", "a=0-3;b=2-5"], "neuron:2"),
        (["--manual", "a=0-3;b=2-5"], "neuron:2"),  # a spec alone means manual mode
        (["--mode", "auto-split", "--manual", "a=0-3"], "a manual spec was given with mode auto-split"),
        (["--partitions", "17"], "more partitions (17)"),
        (["--partitions", "2", "--", "--num-gpus", "1"], "--num-gpus is set per partition"),
        (["--partitions", "2", "--num-gpus", "1"], "No such option '--num-gpus'"),
        (["--partitions", "2", "--address", "127.0.0.1:1"], "give exactly one of --head, --address"),
        (["--", "--labels", "a=b"], "--labels is set per partition by ray-accel; use `ray-accel start --labels"),
        (["--", "--resources", "{}"], "use `ray-accel start --resources"),
        (["--labels", "ray-accel.io/partition=x"], "'ray-accel.io/partition' is ray-accel's own label key"),
        (["--resources", '{"neuron_cores": 1}'], "'neuron_cores' is the accelerator resource"),
        (["--resources", '{"CPU": 1}'], "give the host's figure with -- --num-cpus"),
        (["--labels", "a"], "'a' is not key=value"),
        (["--", "--num-cpus", "x"], "--num-cpus 'x'"),
        (["--no-dashboard", "--", "--include-dashboard", "true"], "--no-dashboard contradicts"),
    ],
)
def test_refused_start_flags_exit_2_and_start_nothing(args: list[str], needle: str, tmp_path: Path) -> None:
    tag = new_tag()
    proc = run_cli_here("start", "--head", "--port", str(free_port()), *args, env=start_env(tmp_path, tag))
    assert_refused(proc, needle, tmp_path, tag)


@badinput("launcher")
def test_taken_ports_exit_2(tmp_path: Path) -> None:
    tag = new_tag()
    env = start_env(tmp_path, tag)
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        taken = s.getsockname()[1]
        proc = run_cli_here("start", "--head", "--partitions", "2", "--port", str(taken), env=env)
        assert_refused(proc, f"port {taken} is already in use", tmp_path, tag)
        base = taken - 3
        args = ("--port", str(free_port()), "--port-base", str(base))
        proc = run_cli_here("start", "--head", "--partitions", "2", *args, env=env)
        assert_refused(proc, f"port {taken} is already in use", tmp_path, tag)


@badinput("launcher")
def test_joining_with_no_token_exits_2_naming_it_and_starts_nothing(tmp_path: Path) -> None:
    tag = new_tag()
    env = start_env(tmp_path, tag, **dict.fromkeys(("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"), ""))
    proc = run_cli_here("start", "--address", f"127.0.0.1:{free_port()}", "--partitions", "2", env=env)
    assert_refused(proc, "no Ray cluster token on this host", tmp_path, tag)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "RAY_AUTH_TOKEN_PATH" in lines[0], lines
    assert not (tmp_path / "home" / ".ray").exists(), "no token made for a joining host"


REFUSED_INIT = r"""
import json, os, psutil
import ray_accel
out = {}
try:
    ray_accel.init(address="local", num_cpus=1, include_dashboard=False, resources={"neuron_cores": 8})
    out["refused"] = None
except ValueError as e:
    out["refused"] = str(e)
try:
    ray_accel.init(partition="2-5", address="local", num_cpus=1, include_dashboard=False)
except ValueError as e:
    out["outside"] = str(e)
out["children"] = [p.cmdline()[:2] for p in psutil.Process().children(recursive=True)]
ray_dir = os.path.join(os.environ["TMPDIR"], "ray")
out["sessions"] = sorted(os.listdir(ray_dir)) if os.path.isdir(ray_dir) else []
print(json.dumps(out))
"""


@badinput("leftover")
def test_refused_init_leaves_no_process_and_no_session(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAYACCEL_", "NEURON_RT_", "RAY_"))}
    env.update(RAYACCEL_MOCK="trn1.32xlarge", NEURON_RT_VISIBLE_CORES="0-3", TMPDIR=str(tmp_path))
    env["PYTHONPATH"] = repo_pythonpath()
    proc = subprocess.run([sys.executable, "-c", REFUSED_INIT], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["refused"] is not None and "resources['neuron_cores']=8" in out["refused"]
    assert "NEURON_RT_VISIBLE_CORES=0-3" in out["refused"]
    assert "outside the inherited mask NEURON_RT_VISIBLE_CORES=0-3" in out["outside"]
    assert out["children"] == [], f"the refused init left processes: {out['children']}"
    assert out["sessions"] == [], "no Ray session directory"
