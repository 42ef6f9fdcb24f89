from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from ray_accel.cluster.ports import free_port
from tests.conftest import repo_pythonpath, run_cli


def raylet_pids() -> set[int]:
    out = set()
    for p in psutil.process_iter(["name", "status"]):
        if p.info["name"] == "raylet" and p.info["status"] != psutil.STATUS_ZOMBIE:
            out.add(p.pid)
    return out


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

    @property
    def address(self) -> str:
        return str(self.status["gcs_address"])

    def part(self, name: str) -> dict[str, Any]:
        return next(p for p in self.status["partitions"] if p["partition"] == name)

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, env=self.env, timeout=timeout)

    def refresh(self) -> dict[str, Any]:
        proc = self.cli("status", "--json")
        assert proc.returncode == 0, proc.stderr
        self.status = json.loads(proc.stdout)
        return self.status

    def driver(self, script: str, *args: str, timeout: float = 300) -> Any:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAYACCEL_")}
        env.update(self.status["env"])  # exactly what `status --json` tells a driver
        env["PYTHONPATH"] = repo_pythonpath()
        proc = subprocess.run(
            [sys.executable, "-c", script, self.address, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return last_json(proc.stdout)


ROOT = Path(__file__).resolve().parents[2]


def start_cluster(tmp: Path, preset: str, agents: int, *ray_args: str) -> Cluster:
    # Workers import the example hooks and train loop from the repository.
    env = {"RAYACCEL_MOCK": preset, "RAYACCEL_STATE_DIR": str(tmp / "state"), "PYTHONPATH": repo_pythonpath()}
    proc = run_cli(
        "start",
        "--head",
        "--agents",
        str(agents),
        "--port",
        str(free_port()),
        "--json",
        *(["--", *ray_args] if ray_args else []),
        env=env,
        timeout=300,
    )
    if proc.returncode != 0:
        run_cli("stop", "--grace", "2", env=env)
        pytest.fail(f"ray-accel start failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return Cluster(env, json.loads(proc.stdout))


@pytest.fixture(scope="module")
def trn1_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = start_cluster(tmp_path_factory.mktemp("trn1"), "trn1.32xlarge", 2)
    try:
        yield cluster
    finally:
        cluster.cli("stop", "--grace", "2")
