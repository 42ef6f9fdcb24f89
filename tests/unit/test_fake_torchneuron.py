"""The fake TorchNeuron (tests/fakes/torch_neuronx_fake.py) keeps the rules it
models, and ray-accel's `neuron` workers keep them: each case is processes
that load the fake as torch loads TorchNeuron (an entry point on their
PYTHONPATH; never this process, whose PrivateUse1 device stays unnamed).

The environment is what `NeuronRuntime.worker_env` gives the two workers of
one partition of a mock trn2.48xlarge split in two: p1, cores 32-63, so each
worker's core differs from its LOCAL_RANK."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray_accel_neuron.runtime import NeuronRuntime
from ray_accel_neuron.stacks import Stacks
from ray_accel_neuron.torchneuron import NEURON

from ray_accel.cluster.host import free_port
from ray_accel.plugins.runtime import Rank, WorkerSlot
from tests.cli_process import repo_pythonpath
from tests.fakes import torch_neuronx_fake as fake
from tests.fakes.torchneuron import RECORD_ENV, install, records
from tests.fakes.torchneuron_scenarios import MODULE as SCENARIOS


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install(tmp_path_factory.mktemp("torchneuron-site"))


def run(site: Path, record: Path, scenario: str, args: dict[str, Any], **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), repo_pythonpath()]), RECORD_ENV: str(record)}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-m", SCENARIOS, scenario, json.dumps(args)],
        env=full,
        capture_output=True,
        text=True,
        timeout=180,
    )


def result(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def partition_envs(cores: list[int], drop: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """ray-accel's environment for one worker per core, all on one raylet."""
    port, comm = free_port(), free_port()
    n = len(cores)
    slots = [
        WorkerSlot(
            rank=Rank(i, n, i, n, 0),
            node_id="p1",
            own_ids=(str(c),),
            master_addr="127.0.0.1",
            master_port=port,
            comm_port=comm,
            accelerator_type="Trainium2",
        )
        for i, c in enumerate(cores)
    ]
    ours = NeuronRuntime(probe=lambda: Stacks(torchneuron=None, xla="absent"), efa=lambda: False)
    envs = [ours.worker_env(w, slots, NEURON) for w in slots]
    return [{k: v for k, v in e.items() if k not in drop} for e in envs]


def together(site: Path, record: Path, envs: list[dict[str, str]], **extra: Any) -> list[dict[str, Any]]:
    with concurrent.futures.ThreadPoolExecutor(len(envs)) as pool:
        procs = list(pool.map(lambda e: run(site, record, "worker", {"env": e, **extra}), envs))
    return [result(p) for p in procs]


def test_ray_accel_workers_open_their_own_core_and_train_on_the_neuron_group(site: Path, tmp_path: Path) -> None:
    r0, r1 = together(site, tmp_path, partition_envs([32, 33]), fork=True)
    for local, r in enumerate((r0, r1)):
        assert r["problem"] is None, "found by feature after `import torch`"
        assert r["before"] == {"device_count": 1, "started": False}, "one visible core; nothing started before"
        assert r["backend"] == "neuron" and r["sum"] == 3.0
        assert r["device"] == f"neuron:{local}" == f"neuron:{r['current_device']}", "numbered by LOCAL_RANK"
        assert r["device_count"] == 2 and r["visible"] == str(32 + local)
        valid = f"Valid range is {local} to {local} for this process"
        assert r["past"] == f"RuntimeError: Device index {local + 1} is out of range. {valid}"
        assert r["below"] == f"RuntimeError: {fake.NOT_ATTACHED}", "an index below LOCAL_RANK is not this process's"
        assert r["forked_child"].startswith("RuntimeError: Cannot re-initialize Neuron runtime in forked subprocess")
        assert r["collectives"] == {"allreduce": 1, "barrier": 1}
    rows = records(tmp_path)
    workers = [row for row in rows if row["forked_from"] is None]
    assert sorted(c for row in workers for c in row["cores"]) == [32, 33], "each core opened once, by its worker"
    children = [row for row in rows if row["forked_from"] is not None]
    assert {c["forked_from"] for c in children} == {w["pid"] for w in workers}, "each fork recorded"


def test_without_ray_accel_s_visible_core_torchneuron_opens_local_rank_another_partition_s(
    site: Path, tmp_path: Path
) -> None:
    """Why ray-accel sets NEURON_RT_VISIBLE_CORES before torch starts: by
    default TorchNeuron opens core LOCAL_RANK, which in partition p1 is a core
    of p0."""
    results = together(site, tmp_path, partition_envs([32, 33], drop=("NEURON_RT_VISIBLE_CORES",)))
    assert [r["visible"] for r in results] == ["0", "1"]
    assert sorted(c for row in records(tmp_path) for c in row["cores"]) == [0, 1]


def test_a_core_held_by_one_process_is_refused_to_another(site: Path, tmp_path: Path) -> None:
    (env,) = partition_envs([40])
    r = result(run(site, tmp_path, "worker", {"env": env, "second_opens": free_port()}))
    assert r["second"] and "NeuronCore 40 is reserved by another process" in r["second"][0], r["second"]


def test_two_visible_cores_are_refused_when_the_group_is_made(site: Path, tmp_path: Path) -> None:
    (env,) = partition_envs([40])
    proc = run(site, tmp_path, "worker", {"env": {**env, "NEURON_RT_VISIBLE_CORES": "40-41"}})
    assert proc.returncode != 0 and fake.ONE_DEVICE in proc.stderr, proc.stderr[-2000:]


def test_a_runtime_started_before_the_group_is_refused(site: Path, tmp_path: Path) -> None:
    (env,) = partition_envs([40])
    r = result(run(site, tmp_path, "early", {"env": env}))
    assert r["error"] == f"AssertionError: {fake.BEFORE_PG}"


def test_with_autoload_off_torchneuron_is_missing_and_ray_accel_says_why(site: Path, tmp_path: Path) -> None:
    probe = "from ray_accel_neuron import torchneuron; print(torchneuron.problem_here())"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), repo_pythonpath()])}
    off = subprocess.run(
        [sys.executable, "-c", probe],
        env={**env, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert off.returncode == 0, off.stderr
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0 kept `import torch` from loading" in off.stdout
    assert "(torch_neuronx)" in off.stdout


@given(st.integers(0, 127), st.integers(0, 127))
def test_the_fake_reads_visible_cores_as_the_runtime_documents_them(a: int, b: int) -> None:
    """One index or an inclusive range (Neuron runtime configuration guide)."""
    assert fake.parse_visible_cores(str(a)) == [a]
    if a <= b:
        assert fake.parse_visible_cores(f"{a}-{b}") == list(range(a, b + 1))
    else:
        with pytest.raises(RuntimeError, match="ends before it starts"):
            fake.parse_visible_cores(f"{a}-{b}")


@pytest.mark.parametrize("value", ["", "a", "1,2", "-1", "1-", "1-2-3", "0x1"])
def test_the_fake_refuses_what_the_runtime_does_not_document(value: str) -> None:
    with pytest.raises(RuntimeError, match="NEURON_RT_VISIBLE_CORES"):
        fake.parse_visible_cores(value)
