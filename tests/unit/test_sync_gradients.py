"""`sync_gradients` reduces through whatever group the job has.

- gloo on CPU tensors (main venv): a real gloo group, in a child process;
- an `xla` group (XLA lane): a real one, made by ray-accel's own
  `init_xla_group` on PJRT CPU (one process, world 1), with every XLA reduce
  recorded: the gradients themselves, XLA tensors, all of them, in one call
  to `xm.all_reduce` (tests/integration/xla_probes.py, mode sync-xla). With
  XLA_ALWAYS_ALLREDUCE=1 the reduce is really compiled and run (otherwise
  torch-xla skips it at world size 1, core/xla_model.py:431-436). Several
  processes cannot be tested on PJRT CPU: its client is single-process, so
  XLA collectives there return the local value (see docs/design.md); that is
  why the mock's XLA jobs reduce through gloo (tests/integration/test_xla.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ray_accel.cluster.host import free_port
from tests.cli_process import ROOT

GLOO = r"""
import json, sys
import torch, torch.distributed as dist
from ray_accel.train import sync_gradients
dist.init_process_group("gloo", init_method="env://", rank=0, world_size=1)
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
(model(torch.randn(8, 4)) ** 2).mean().backward()
before = [p.grad.clone() for p in model.parameters()]
sync_gradients(model)
print(json.dumps({"same": all(torch.equal(a, p.grad) for a, p in zip(before, model.parameters())),
                  "group": dist.get_backend()}))
"""


def child_env(**extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        **extra,
    }


def test_gloo_group_without_a_ray_accel_context() -> None:
    """The path is the group's own backend: no ray-accel context is needed."""
    proc = subprocess.run(
        [sys.executable, "-c", GLOO], env=child_env(), capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == {"same": True, "group": "gloo"}


def sync_xla(tmp_path: Path, **extra: str) -> dict[str, Any]:
    out = tmp_path / "sync.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.integration.xla_probes", "sync-xla", str(out)],
        env=child_env(PJRT_DEVICE="CPU", **extra),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0 and out.exists(), proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["error"] is None, result
    return result


@pytest.mark.xla
@pytest.mark.parametrize("always", [False, True], ids=["world-1-shortcut", "reduce-compiled"])
def test_xla_group_path_reduces_the_xla_gradients_with_the_xla_reduce(tmp_path: Path, always: bool) -> None:
    pytest.importorskip("torch_xla", reason="the XLA lane runs in .venv-xla (make test-xla)")
    r = sync_xla(tmp_path, **({"XLA_ALWAYS_ALLREDUCE": "1"} if always else {}))
    assert r["group"] == "xla" and r["xr_world_size"] == 1, "init_xla_group set the replication"
    assert r["device"] == "xla", "the model is on the device the runtime chose for the xla collective"
    assert len(r["calls"]) == 1, r["calls"]
    (call,) = r["calls"]
    assert call["reduce"] == "sum" and call["devices"] == ["xla"], call
    assert call["n"] == r["params_with_grad"] == 2, "every gradient, the XLA tensors themselves"
    assert call["scale"] == 1.0, "scaled by 1/world"
    assert r["grads_equal_at_world_1"], "a mean over one worker leaves the gradients as they are"
