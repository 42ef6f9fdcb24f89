"""Token auth from nothing, on a machine where Ray never ran.

Every test here runs the CLI with a HOME of its own that starts empty, so no
token left by an earlier test or run can make it pass.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ray_accel.cluster.host import free_port
from tests.cli_process import repo_pythonpath, run_cli

pytestmark = pytest.mark.ray

DRIVER = r"""
import json, os, sys
import ray
ray.init(address=sys.argv[1], log_to_driver=False)

@ray.remote(num_cpus=0, resources={"neuron_cores": 1})
def where():
    return ray.get_runtime_context().get_node_labels().get("ray-accel.io/partition")

parts = sys.argv[2].split(",")
print(json.dumps(ray.get([where.options(label_selector={"ray-accel.io/partition": p}).remote() for p in parts])))
"""


def test_head_with_no_token_anywhere_makes_one_and_a_driver_needs_only_status_json(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "RAYACCEL_MOCK": "trn1.32xlarge", "RAYACCEL_STATE_DIR": str(tmp_path / "state")}
    env.update(dict.fromkeys(("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"), ""))  # none inherited
    started = run_cli(
        "start", "--head", "--partitions", "2", "--port", str(free_port()), "--no-metrics", "--no-dashboard", env=env
    )
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        status = json.loads(run_cli("status", "--json", env=env).stdout)
        token_file = Path(status["env"]["RAY_AUTH_TOKEN_PATH"])
        assert status["env"]["RAY_AUTH_MODE"] == "token"
        assert token_file == home / ".ray" / "auth_token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        assert len(token) >= 32

        # A driver in another, empty HOME: it can only know what status --json said.
        driver_home = tmp_path / "driver-home"
        driver_home.mkdir()
        driver_env = {
            k: v for k, v in os.environ.items() if not k.startswith(("RAYACCEL_", "RAY_AUTH")) and k != "HOME"
        }
        driver_env.update(status["env"], HOME=str(driver_home), PYTHONPATH=repo_pythonpath())
        proc = subprocess.run(
            [sys.executable, "-c", DRIVER, status["gcs_address"], "p0,p1"],
            env=driver_env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["p0", "p1"]
        assert not (driver_home / ".ray" / "auth_token").exists()

        outputs = started.stdout + started.stderr + json.dumps(status) + proc.stdout + proc.stderr
        assert token not in outputs, "the token is never printed"
        assert "RAY_AUTH_TOKEN_PATH" in started.stdout + started.stderr, "start prints the driver's environment"
        leaked = [str(p) for p in tmp_path.rglob("*") if p.is_file() and p != token_file and token in _text(p)]
        assert not leaked, f"the token was written outside its 0600 file: {leaked}"
    finally:
        run_cli("stop", "--grace", "2", env=env)


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


@pytest.fixture
def cleanup() -> Iterator[list[Path]]:
    made: list[Path] = []
    yield made
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


LOCAL_INIT = r"""
import json, os, stat, sys
from pathlib import Path
import ray, ray_accel
init = ray_accel.init if sys.argv[1] == "ray_accel" else ray.init
init(address="local", num_cpus=1, log_to_driver=False)  # a new local cluster, never a neighbour
token = Path.home() / ".ray" / "auth_token"
up = ray.get(ray.remote(lambda: 1).remote())
ray.shutdown()
print(json.dumps({"up": up, "mode": oct(stat.S_IMODE(token.stat().st_mode)), "auth": os.environ.get("RAY_AUTH_MODE")}))
"""


def test_a_local_ray_accel_init_makes_the_token_0600_where_plain_ray_writes_0644(
    tmp_path: Path, cleanup: list[Path]
) -> None:
    """Ray 2.60's own `ray.init()` turns token auth on for a new local cluster
    and writes a missing token with the umask (`generate_and_save_token`);
    `ray_accel.init()` makes the file first, 0600. Each run has its own empty HOME."""
    results = {}
    for which in ("ray", "ray_accel"):
        home = tmp_path / which
        home.mkdir()
        # Ray's socket paths must stay under 108 bytes: a short TMPDIR of its own.
        tmp = Path(tempfile.mkdtemp(prefix="ra-auth-", dir="/tmp"))
        cleanup.append(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAYACCEL_", "RAY_"))}
        env.update(HOME=str(home), TMPDIR=str(tmp), RAYACCEL_MOCK="trn1.32xlarge", PYTHONPATH=repo_pythonpath())
        proc = subprocess.run(
            [sys.executable, "-c", LOCAL_INIT, which], env=env, capture_output=True, text=True, timeout=300, umask=0o022
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[which] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert results["ray_accel"] == {"up": 1, "mode": "0o600", "auth": "token"}, results
    assert results["ray"]["up"] == 1 and results["ray"]["mode"] == "0o644", "Ray's own writer, which we guard against"
