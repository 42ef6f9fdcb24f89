"""torch-xla 2.9's own Neuron start-up on the environments ray-accel computes (XLA lane).

A mock trn1.32xlarge planned into 2
partitions (ray-accel's own planner), a 4-worker job, 2 workers per
partition, each granted a block of its partition's cores (2 cores per worker,
then 1). Each worker's environment is `NeuronRuntime().worker_env(...)`, the
product's, with PJRT_DEVICE=NEURON. Every worker then runs in a fresh
interpreter with exactly that environment through torch-xla's own
initialisation functions and ray-accel's own `xla` group set-up, up to the
PJRT client (tests/integration/xla_probes.py names each function, file:line).
Judged by the Neuron runtime's rule and PJRT's view (tests/fakes/
neuron_runtime.py): afterwards every worker still sees exactly its own cores,
no core is seen by two, PJRT's index and counts match. The same fake is held
to torch-xla's real behaviour here: the control (TORCHELASTIC_RUN_ID added,
which makes torch-xla remap) must fail in torch-xla and in the fake alike.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from ray_accel_mock import MockPlugin, load_spec
from ray_accel_neuron.runtime import NeuronRuntime

from ray_accel.partition.plan import Mode
from ray_accel.plugins.runtime import WorkerSlot
from ray_accel.train.ranks import assign_ranks
from tests.cli_process import ROOT
from tests.fakes.neuron_runtime import NeuronRuntimeError, start_job
from tests.planning import plan_for

pytestmark = pytest.mark.xla


@pytest.fixture(scope="module", autouse=True)
def _torch_xla() -> None:
    pytest.importorskip("torch_xla", reason="the XLA lane runs in .venv-xla (make test-xla)")


def job(per_worker: int) -> list[WorkerSlot]:
    plan = plan_for(MockPlugin(load_spec("trn1.32xlarge")).list_devices(), Mode.AUTO_SPLIT, 2)
    assert [len(p.core_ids) for p in plan.partitions] == [16, 16]
    raylets, own = [], []
    for part in plan.partitions:
        for w in range(2):
            raylets.append(part.name)
            own.append(part.core_ids[w * per_worker : (w + 1) * per_worker])
    return [
        WorkerSlot(rank=p, node_id=raylet, own_ids=tuple(map(str, ids)), master_addr="10.0.0.5", master_port=45000)
        for p, raylet, ids in zip(assign_ranks(raylets), raylets, own, strict=True)
    ]


def collective(per_worker: int) -> str:
    """The `xla` group is refused for workers of several cores (one device per
    process); their environment is the same under gloo, which such a job uses."""
    return "xla" if per_worker == 1 else "gloo"


def run_worker(env: dict[str, str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        full = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": tmp,
            "TMPDIR": tmp,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            **env,
        }
        proc = subprocess.run(
            [sys.executable, "-m", "tests.integration.xla_probes", "neuron-start", str(out)],
            env=full,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0 and out.exists(), proc.stderr[-3000:]
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def run_job(envs: list[dict[str, str]]) -> list[dict[str, Any]]:
    # Two at a time: each worker imports torch-xla (seconds of CPU on 2 cores).
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return list(pool.map(run_worker, envs))


@pytest.mark.parametrize(("per_worker", "counts"), [(2, "2,2,2,2"), (1, "1,1,1,1")])
def test_every_worker_still_sees_exactly_its_own_cores(per_worker: int, counts: str) -> None:
    slots = job(per_worker)
    envs = [NeuronRuntime().worker_env(w, slots, collective(per_worker)) for w in slots]
    assert {e["PJRT_DEVICE"] for e in envs} == {"NEURON"}
    results = run_job(envs)
    after = []
    for w, env, r in zip(slots, envs, results, strict=True):
        assert r["error"] is None, r
        assert r["found_libneuronxla"] is False and r["runtime_initialized"] is False, "no hardware was needed"
        # ray-accel's set-up reached the client first thing: nothing of the
        # plugin's initialize_env ran (it would rewrite the index, remap the cores).
        assert r["boundaries"] == {"xla://": "xr.process_count", "init_xla_group": "torch_xla.device"}, r
        assert r["visible_cores"] == [int(i) for i in w.own_ids], f"rank {w.rank.world_rank}: {r}"
        for k in ("NEURON_RT_VISIBLE_CORES", "NEURON_PJRT_PROCESS_INDEX", "NEURON_RT_ROOT_COMM_ID"):
            assert r["env"][k] == env[k], (k, r["env"][k], env[k])
        assert r["env"]["NEURON_PJRT_PROCESSES_NUM_DEVICES"] == counts
        assert r["env"]["NEURON_PJRT_WORLD_SIZE"] is None, "one PJRT layout, never both"
        assert "NEURON_RT_VISIBLE_CORES" not in r["written"] and "NEURON_PJRT_PROCESS_INDEX" not in r["written"]
        after.append({**env, **{k: v for k, v in r["env"].items() if v is not None}})
    opened = start_job(after)  # the runtime's rule on what torch-xla left
    assert [opened[w.rank.world_rank] for w in slots] == [[int(i) for i in w.own_ids] for w in slots]
    seen = [c for cores in opened.values() for c in cores]
    assert len(seen) == len(set(seen)) == 4 * per_worker, "no core seen by two workers"


@pytest.mark.parametrize("per_worker", [2, 1])
def test_torchelastic_control_fails_in_torch_xla_and_in_the_fake(per_worker: int) -> None:
    """The same environments plus TORCHELASTIC_RUN_ID (what Ray's V1
    TorchXLAConfig sets, ray/train/torch/xla/config.py:137; no hook may set
    it): torch-xla narrows a 2-core worker to one core, or refuses a 1-core
    worker, at import (_internal/neuron.py:58-81). The fake predicts it."""
    slots = job(per_worker)
    envs = [
        {**NeuronRuntime().worker_env(w, slots, collective(per_worker)), "TORCHELASTIC_RUN_ID": "control"}
        for w in slots
    ]
    results = run_job(envs)
    if per_worker == 1:
        assert all(r["error"] and r["error"]["type"] == "ValueError" for r in results), results
        assert all("LOCAL_WORLD_SIZE" in r["error"]["message"] for r in results)
    else:
        assert all(r["error"] is None for r in results), results
        assert [r["visible_cores"] for r in results] == [[int(w.own_ids[w.rank.local_rank])] for w in slots]
    with pytest.raises(NeuronRuntimeError):
        start_job(envs)
