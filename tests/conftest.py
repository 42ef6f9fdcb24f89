from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from ray_accel.core import masks

ROOT = Path(__file__).resolve().parent.parent
CLI = str(Path(sys.executable).parent / "ray-accel")

CliRunner = Callable[..., subprocess.CompletedProcess[str]]


def sigint_as_default() -> None:
    """`preexec_fn` for a child a test interrupts with SIGINT. A command a
    shell runs in the background without job control starts with SIGINT
    ignored (bash(1), "asynchronous commands"), the ignore is inherited, and
    Python then never raises KeyboardInterrupt: a whole suite started that way
    saw its child ignore the test's SIGINT. The tests are about what our code
    does on SIGINT, so the child gets the default handling."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def repo_pythonpath() -> str:
    """PYTHONPATH for a child process: this checkout first (workers import the
    examples), then whatever the caller had, which in a worktree or CI run is
    where the product itself comes from. Never replaced outright."""
    return os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


def run_cli(*args: str, env: Mapping[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the installed console script with a clean RAYACCEL_* environment."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("RAYACCEL_")}
    full.update(env or {})
    return subprocess.run([CLI, *args], env=full, capture_output=True, text=True, timeout=timeout)


def cli_json(*args: str, env: Mapping[str, str] | None = None) -> Any:
    proc = run_cli(*args, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def cli() -> CliRunner:
    """The CLI in this process (`tests.clirun`): as the console script, without its start-up."""
    from tests.clirun import run_cli_here

    return run_cli_here


@pytest.fixture(scope="session")
def _pure_mask_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("masks")


@pytest.fixture(autouse=True)
def _no_inherited_seams(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    for k in list(os.environ):
        if k.startswith("RAYACCEL_"):
            monkeypatch.delenv(k)
    if not any(request.node.get_closest_marker(m) for m in ("ray", "multihost")):
        # Mask records are host-wide, like the vendor tools' process reports
        # they stand for: a pure test that publishes from the pytest process
        # (the bridge's set_visible does) would otherwise hold that device,
        # as an orphan, in the clusters of the Ray tier running beside it
        # (.ci/pytest-tiers). CI saw exactly that: pytest's PID holding
        # neuron:3 in test_metrics' cluster.
        monkeypatch.setenv(masks.MASK_DIR_ENV, str(request.getfixturevalue("_pure_mask_dir")))


# Per-example deadlines measure the machine, not the code, once the unit tier
# shares two cores with a running Ray cluster (make unit runs both at once:
# .ci/pytest-tiers).
settings.register_profile("ray-accel", deadline=None)
settings.load_profile("ray-accel")
