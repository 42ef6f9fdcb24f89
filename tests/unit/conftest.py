"""Fixtures of the unit tests of the health decider (test_health_cli,
test_health_kept, test_health_proof): a tag for what a test starts, stand-in
raylets (`tests.stand_ins`) and the environment of a mock host. A module that
defines a fixture of the same name (test_cluster_safety) uses its own."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ray_accel.core.processes import read_cmdline
from tests.decider_harness import Spawn, wait_for
from tests.stand_ins import RAYLET_PATH
from tests.tagged import new_tag, tagged


@pytest.fixture
def tag() -> dict[str, str]:
    return new_tag()


@pytest.fixture
def spawn(tmp_path: Path, tag: dict[str, str]) -> Iterator[Spawn]:
    """`sleep` run under the path of Ray's raylet binary: a stand-in raylet."""
    fake = tmp_path / "site-packages" / RAYLET_PATH
    fake.parent.mkdir(parents=True)
    os.symlink(shutil.which("sleep") or "/bin/sleep", fake)
    started: list[subprocess.Popen[bytes]] = []

    def run() -> subprocess.Popen[bytes]:
        p = subprocess.Popen([str(fake), "600"], env={**os.environ, **tag})
        started.append(p)
        wait_for(lambda: (read_cmdline(p.pid) or [])[:1] == [str(fake)], 5)
        return p

    yield run
    for p in started:
        p.kill()
        p.wait()


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tag: dict[str, str]) -> Iterator[dict[str, str]]:
    values = {
        "RAYACCEL_MOCK": "trn1.2xlarge",
        "RAYACCEL_STATE_DIR": str(tmp_path / "state"),
        "RAYACCEL_MOCK_FAULTS": str(tmp_path / "faults.json"),
        "HOME": str(tmp_path),
        **tag,
    }
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    yield values
    for pid in tagged(tag):
        os.kill(pid, 9)  # what this test started and left, by PID
