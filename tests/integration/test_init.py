"""Ranges in NEURON_RT_VISIBLE_CORES, ours against plain Ray."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.integration import drivers

pytestmark = pytest.mark.ray


def _run(script: str, **env: str) -> dict[str, object]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("RAYACCEL_", "NEURON_RT_", "RAY_"))}
    full.update(env)
    proc = subprocess.run([sys.executable, "-c", script], env=full, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_ray_accel_init_counts_a_range_as_four_cores() -> None:
    out = _run(drivers.INIT_RANGES, RAYACCEL_MOCK="trn1.32xlarge", NEURON_RT_VISIBLE_CORES="0-3")
    assert out["neuron_cores"] == 4.0
    assert out["type"] == ["accelerator_type:Trainium"]
    seen = out["seen"]
    assert isinstance(seen, list)
    assert set(seen) <= {"0,1", "2,3", "0,2", "0,3", "1,2", "1,3"}


def test_plain_ray_reads_the_same_range_as_one_core() -> None:
    # Ray 2.60 behaviour (ray/_private/accelerators/neuron.py parses with split(",")): the
    # range is split on commas only, so the node registers a single core.
    out = _run(drivers.PLAIN_RAY_RANGES, NEURON_RT_VISIBLE_CORES="0-3")
    assert out["parsed"] == ["0-3"]
    assert out["neuron_cores"] == 1.0
