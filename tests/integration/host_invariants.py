"""What must hold of a host after any host change or recovery, read from the
record, from Ray (the GCS, a task pinned to each partition) and from the
host's processes; and how a crash test kills a change at a named step."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ray_accel.core.health_state import PartState
from ray_accel.hostops.steps import CRASH_ENV
from tests.cli_process import CLI
from tests.integration.cluster_harness import Cluster, raylet_pids
from tests.integration.health_steps import gcs_view, record, until

SERVING = (PartState.SERVING, PartState.SHRUNK)

# A detached actor holding 2 NeuronCores of the node it is pinned to ("create NODE"), or
# asked again where it runs ("again"): what a change must leave running.
ACTOR = r"""
import json, sys
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address=sys.argv[1], namespace="holder-test", log_to_driver=False)

class Holder:
    def where(self):
        return ray.get_runtime_context().get_node_id()

if sys.argv[2] == "create":
    strategy = NodeAffinitySchedulingStrategy(sys.argv[3], soft=False)
    h = ray.remote(Holder).options(name="holder", lifetime="detached", num_cpus=0, resources={"neuron_cores": 2},
                                   scheduling_strategy=strategy).remote()
else:
    h = ray.get_actor("holder")
print(json.dumps([ray.get(h.where.remote(), timeout=120)]))
"""

# One task pinned to each partition (by its label), asking for one of its units.
PINNED = r"""
import json, os, sys
import ray
ray.init(address=sys.argv[1], log_to_driver=False)

@ray.remote(num_cpus=0)
def where():
    return os.environ.get("NEURON_RT_VISIBLE_CORES"), ray.get_runtime_context().get_node_id()

names = json.loads(sys.argv[2])
refs = {n: where.options(label_selector={"ray-accel.io/partition": n}, resources={"neuron_cores": 1}).remote()
        for n in names}
print(json.dumps({n: ray.get(r, timeout=120) for n, r in refs.items()}))
"""


def devices_of(split: str) -> dict[str, tuple[str, ...]]:
    """A manual spec's devices per partition (`a=0-3;cd=8-15`: neuron:0..3, ...)."""
    out = {}
    for part in split.split(";"):
        name, ranges = part.split("=")
        ids: list[str] = []
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            ids += [f"neuron:{i}" for i in range(int(lo), int(hi or lo) + 1)]
        out[name] = tuple(ids)
    return out


def check_invariants(
    cluster: Cluster,
    all_devices: Sequence[str],
    split: Mapping[str, Sequence[str]],
    mask: frozenset[int] | None = None,
) -> None:
    """Every invariant of a host after a change or a recovery (`split`: each
    partition's devices as planned; `mask`: the cores the host was started
    under), or an AssertionError saying which."""
    rec = record(cluster)
    assert rec.change is None, f"a change is still recorded: {rec.change}"
    assert {p.name: p.device_ids for p in rec.partitions} == {k: tuple(v) for k, v in split.items()}
    # Every device is in exactly one serving partition, out of service, or unassigned.
    serving = [d for p in rec.partitions if p.health.state in SERVING for d in p.serving.device_ids]
    out = [d for p in rec.partitions for d in p.out]
    spare = [d for s in rec.unassigned for d in s.device_ids]
    assert sorted([*serving, *out, *spare]) == sorted(all_devices), (serving, out, spare)
    # Ray's alive nodes of this host are exactly the raylets the record names, and none drains.
    nodes, draining = gcs_view(cluster)
    alive = {n for n, v in nodes.items() if v.alive}
    recorded = {p.node_id for p in rec.raylets() if p.processes and p.node_id}
    assert alive == recorded, f"alive in Ray {sorted(alive)}, recorded {sorted(recorded)}"
    assert not set(draining) & recorded, f"a recorded raylet is draining: {draining}"
    pids = {r.pid for p in rec.raylets() if (r := p.raylet()) is not None}
    assert until(lambda: raylet_pids() == pids, 30), (raylet_pids(), pids)
    # Every partition recorded serving takes a task pinned to it, on its own cores.
    names = [p.name for p in rec.partitions if p.health.state in SERVING]
    answers = cluster.driver(PINNED, json.dumps(names))
    for p in rec.partitions:
        if p.name in names:
            cores, node = answers[p.name]
            assert node == p.node_id, (p.name, node, p.node_id)
            assert {int(c) for c in cores.split(",")} <= set(p.serving.core_ids), (p.name, cores)
    cores = sum(v.total.get("neuron_cores", 0) for v in nodes.values() if v.alive)
    assert cores == sum(len(p.serving.core_ids) for p in rec.partitions if p.processes)
    if mask is not None:
        outside = {c for p in rec.partitions for c in p.core_ids} - mask
        assert not outside, f"cores {sorted(outside)} outside the mask are planned"
    # No two raylets' port blocks (their ports and worker ports) meet, and each is inside the user's range.
    blocks = [(p.name, set(p.ports.all())) for p in rec.raylets()]
    for i, (name, ports) in enumerate(blocks):
        for other, theirs in blocks[i + 1 :]:
            assert not ports & theirs, f"{name}'s and {other}'s ports meet"
        if rec.port_base is not None:
            assert min(ports) >= rec.port_base, f"{name}'s ports start below --port-base {rec.port_base}"


def killed_at(cluster: Cluster, step: str, args: Sequence[str], log: Path, timeout_s: float = 120) -> str:
    """Run `ray-accel ARGS` with the failpoint at `step`: once its helper says
    the step, the command is SIGKILLed too (the helper kills itself there).
    What the command and its helper said."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAYACCEL_")}
    env.update(cluster.env, **{CRASH_ENV: step})
    with open(log, "w") as out:
        cli = subprocess.Popen([CLI, *args], env=env, stdout=subprocess.DEVNULL, stderr=out, text=True)
    helper_log = cluster.state_dir / "repartition.log"
    said = f"step {step.partition('@')[0]}:"
    try:
        until(lambda: cli.poll() is not None or (helper_log.exists() and said in helper_log.read_text()), timeout_s)
    finally:
        if cli.poll() is None:
            os.kill(cli.pid, signal.SIGKILL)
        cli.wait(30)
    text = log.read_text() + (helper_log.read_text() if helper_log.exists() else "")
    assert said in text, f"the change never reached step {step}: {text[-3000:]}"
    return text


def recovered(cluster: Cluster, limit_s: float = 90) -> tuple[float, str]:
    """`start --recover`: how long it took, and what it said; it must succeed."""
    began = time.monotonic()
    proc = cluster.cli("start", "--recover", "--json", timeout=limit_s + 60)
    took = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr[-3000:]
    return took, proc.stderr
