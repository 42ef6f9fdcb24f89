"""The same lifecycle hooks around plain Ray tasks and actors (real Ray)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.cli_process import repo_pythonpath
from tests.integration import drivers

pytestmark = pytest.mark.ray


def test_tasks_and_actors_run_hooks_and_a_killed_actor_is_reconciled(tmp_path: Path) -> None:
    log = tmp_path / "hooks.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAYACCEL_", "RAY_"))}
    env.update(RAYACCEL_MOCK="trn1.32xlarge", PYTHONPATH=repo_pythonpath())
    proc = subprocess.run(
        [sys.executable, "-c", drivers.TASK_ACTOR_HOOKS, str(log), str(tmp_path / "ledger")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    token, cores = out["first"]
    assert token == "granted", "the hook's env var is set for the task body"
    assert len(cores.split(",")) == 2
    assert out["actor_token"] == "granted"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    counts = Counter(e["event"] for e in events)
    # A hook that returns mounts (docs/design.md, Hooks): the task fails
    # naming the hook and the field, its body never runs, and the hook before
    # it still gets its post_terminate (the sixth of each below).
    assert "hook" in out["mounts"] and "Mounts returned a config that is not allowed" in out["mounts"], out["mounts"]
    assert "mounts=(('/fsx/data', '/data'),) cannot be applied to a Ray worker" in out["mounts"]
    assert counts["pre_create"] == counts["post_terminate"] == 6, counts
    by_workload: dict[str, list[dict[str, object]]] = {}
    for e in events:
        by_workload.setdefault(str(e["workload"]), []).append(e)
    killed = [w for w, es in by_workload.items() if w.startswith("actor-") and len({e["pid"] for e in es}) == 2]
    assert len(killed) == 1, "the killed actor's post_terminate ran in another process"
