"""The installed `ray-accel` console script run as a subprocess, and what a
child process needs of this checkout: its root, its PYTHONPATH, the default
SIGINT handling. (`tests.clirun` runs the CLI in this process instead.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

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
