"""Question: when training jobs come and go on partitioned hosts, how often do
their workers land on linked, aligned devices, how long do they wait, and how
fragmented do partitions get, with ray-accel's placement policies against
Ray's default placement (no label selectors)?

Simulated, no Ray: HOSTS mock trn1.32xlarge hosts (16 devices x 2 NeuronCores,
4x4 torus), each split into PARTITIONS partitions (one raylet each). A seeded
stream of jobs arrives (total sizes 1 to 32 cores, each worker 1, 2, 4 or 8
cores) and each runs for a random time. Every step: finished jobs free their
cores, then the queue is placed (a job starts whole or waits).

What each side sees and does:
- ray-accel policies (`pack`, `spread`, `topology`) see exactly what a driver
  sees through `ray.nodes()` and the per-node available resources: each
  partition's labels (written by `ray-accel start`) and its free counts, built
  into dicts of the shape `ray.nodes()` returns and read by
  `ray_accel.placement.live.view_from_nodes`, plus the jobs they placed
  themselves. Pending jobs go through `policy.optimize`.
- baseline: Ray Train V2 asks for a placement group of one bundle per worker
  with strategy PACK and no selectors (Ray 2.60, ray/train/v2/_internal/
  execution/worker_group/worker_group.py). Ray places it with
  BundlePackSchedulingPolicy (ray-project/ray src/ray/raylet/scheduling/policy/
  bundle_scheduling_policy.cc): take the raylet that scores best for one
  bundle, put there every further bundle that fits, drop that raylet, repeat;
  the score is LeastResourceScorer (scorer.cc): the sum over requested
  resources of (available - requested) / available, so the emptiest raylet
  wins; ties go by hash-map order (random here, seeded). Pending jobs are
  tried in arrival order, each one that fits starts.
- both: inside a raylet Ray grants an integer request the lowest-indexed free
  instances (resource_instance_set.cc, NodeResourceInstanceSet::TryAllocate),
  instance i being the i-th core of the partition's mask. The metrics are
  measured on these granted cores, not on any policy's prediction.

Metrics per run: share of started jobs whose cores are linked (one host, the
devices form one connected piece of the NeuronLink graph) and aligned (every
worker's cores contiguous, starting at a multiple of its size); mean wait in
steps; fragmented partitions, averaged over steps: partitions whose free cores
split into more aligned power-of-two blocks than their count needs. Medians
over seeds.

    python benchmarks/bench_placement.py [--steps N] [--seeds K] [--hosts H] [--partitions P] [--quick] [--json]

`--quick`: 300 steps, 2 seeds (for CI: it keeps the code path working).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ray_accel_mock import MockPlugin
from ray_accel_mock.spec import load_spec

from benchmarks.harness import run_main
from ray_accel.cli.render import render
from ray_accel.core.devices import Device
from ray_accel.core.hosts import HostId
from ray_accel.partition.plan import PARTITION_LABEL, plan_partitions, topology_labels
from ray_accel.placement.live import view_from_nodes
from ray_accel.placement.model import Assignment, Job
from ray_accel.placement.policies import POLICIES, get_policy

PRESET = "trn1.32xlarge"
SIZES = [1, 2, 4, 8, 16, 32]
SIZE_WEIGHTS = [4, 4, 4, 3, 2, 1]
PER_WORKER = [1, 2, 4, 8]


@dataclass
class Raylet:
    """One partition's raylet: instance slots granted lowest-index first."""

    host: str
    name: str
    node_id: str
    core_ids: tuple[int, ...]
    labels: dict[str, str]
    owner: list[str | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.owner = [None] * len(self.core_ids)

    @property
    def free(self) -> int:
        return sum(o is None for o in self.owner)

    def grant(self, worker: str, n: int) -> tuple[int, ...]:
        slots = [i for i, o in enumerate(self.owner) if o is None][:n]
        assert len(slots) == n, "a grant past the raylet's free units"
        for i in slots:
            self.owner[i] = worker
        return tuple(self.core_ids[i] for i in slots)

    def release(self, prefix: str) -> None:
        self.owner = [None if o is not None and o.startswith(prefix) else o for o in self.owner]

    def fragmented(self) -> bool:
        free = {self.core_ids[i] for i, o in enumerate(self.owner) if o is None}
        if not free or len(free) == len(self.core_ids):
            return False
        blocks, left = 0, set(free)
        size = 1 << (len(self.core_ids).bit_length() - 1)
        while size:
            for start in sorted(left):
                if start % size == 0 and all(c in left for c in range(start, start + size)):
                    left -= set(range(start, start + size))
                    blocks += 1
            size //= 2
        return blocks > bin(len(free)).count("1")


@dataclass
class Cluster:
    raylets: list[Raylet]
    devices: dict[str, dict[int, Device]]  # host -> core id -> device

    def nodes(self) -> tuple[list[dict[str, Any]], dict[str, dict[str, float]]]:
        """What `ray.nodes()` and `available_resources_per_node()` would return."""
        nodes = [
            {
                "NodeID": r.node_id,
                "Alive": True,
                "NodeManagerAddress": r.host,
                "Resources": {"CPU": 1.0, "neuron_cores": float(len(r.core_ids))},
                "Labels": {**r.labels, "ray.io/node-id": r.node_id},
            }
            for r in self.raylets
        ]
        return nodes, {r.node_id: {"CPU": 1.0, "neuron_cores": float(r.free)} for r in self.raylets}


def make_cluster(hosts: int, partitions: int) -> Cluster:
    spec = load_spec(PRESET)
    plan = plan_partitions(spec.devices, "auto-split", partitions, traits=MockPlugin(spec).traits)
    raylets, devices = [], {}
    for h in range(hosts):
        host = f"10.0.0.{h + 1}"
        labels = topology_labels(plan.partitions, spec.devices, HostId(f"host{h}", host), spec.family, "neuron_cores")
        devices[host] = {c: d for d in spec.devices for c in d.core_ids}
        for p in plan.partitions:
            raylets.append(
                Raylet(host, p.name, f"{h:02d}{p.name}", p.core_ids, {PARTITION_LABEL: p.name, **labels[p.name]})
            )
    return Cluster(raylets, devices)


def job_stream(seed: int, steps: int, capacity: int) -> list[tuple[int, Job, int]]:
    """(arrival step, job, duration), the same for every policy of a seed."""
    rng = random.Random(seed)
    mean_size = sum(s * w for s, w in zip(SIZES, SIZE_WEIGHTS, strict=True)) / sum(SIZE_WEIGHTS)
    mean_duration = 25
    rate = 0.9 * capacity / (mean_size * mean_duration)  # offered load: 90% of the cores
    out = []
    n = 0
    for step in range(steps):
        arrivals = 0
        # Poisson arrivals by inversion (rate is below 5).
        p, threshold, u = 1.0, pow(2.718281828459045, -rate), rng.random()
        while True:
            p *= u
            if p < threshold:
                break
            arrivals += 1
            u = rng.random()
        for _ in range(arrivals):
            size = rng.choices(SIZES, SIZE_WEIGHTS)[0]
            k = rng.choice([c for c in PER_WORKER if c <= size])
            job = Job(
                id=f"j{n}",
                name=f"j{n}",
                workers=size // k,
                devices_per_worker=k,
                family="neuron",
                resource="neuron_cores",
            )
            out.append((step, job, max(1, int(rng.expovariate(1 / mean_duration)))))
            n += 1
    return out


def judge(cluster: Cluster, job: Job, grants: Sequence[tuple[str, tuple[int, ...]]]) -> tuple[bool, bool]:
    """(linked, aligned) of the cores the raylets granted."""
    aligned = all(list(c) == list(range(c[0], c[0] + len(c))) and c[0] % job.devices_per_worker == 0 for _, c in grants)
    hosts = {h for h, _ in grants}
    if len(hosts) != 1:
        return False, aligned
    by_core = cluster.devices[next(iter(hosts))]
    devs = {by_core[c].id: by_core[c] for _, cores in grants for c in cores}
    seen, stack = set(), [next(iter(devs))]
    while stack:
        d = stack.pop()
        if d in seen:
            continue
        seen.add(d)
        stack += [p for p in devs[d].peers if p in devs]
    return len(seen) == len(devs), aligned


Placer = Callable[[Cluster, list[Job], dict[str, Assignment], random.Random], dict[str, list[Raylet]]]


def policy_placer(name: str) -> Placer:
    policy = get_policy(name)

    def place(cluster: Cluster, queue: list[Job], running: dict[str, Assignment], rng: random.Random) -> Any:
        view = view_from_nodes(*cluster.nodes())
        by_node = {r.node_id: r for r in cluster.raylets}
        jobs = [a.job for a in running.values()] + queue
        placement = policy.optimize(jobs, view.partitions, running)
        out = {}
        for jid, a in placement.assignments.items():
            if jid not in running:
                out[jid] = [by_node[s.node_id] for s in a.workers]
                running[jid] = a
        return out

    return place


def ray_pack_placer(cluster: Cluster, queue: list[Job], running: dict[str, Assignment], rng: random.Random) -> Any:
    free = {r.node_id: r.free for r in cluster.raylets}
    out = {}
    for job in queue:
        candidates = list(cluster.raylets)
        rng.shuffle(candidates)  # ties go by hash-map order
        left, chosen = job.workers, []
        k = job.devices_per_worker
        room = dict(free)
        while left and candidates:
            fits = [r for r in candidates if room[r.node_id] >= k]
            if not fits:
                break
            best = max(fits, key=lambda r: (room[r.node_id] - k) / room[r.node_id])
            n = min(left, room[best.node_id] // k)
            chosen += [best] * n
            room[best.node_id] -= n * k
            left -= n
            candidates.remove(best)
        if left == 0:  # a placement group is made whole or waits
            out[job.id] = chosen
            free = room
    return out


@dataclass
class Result:
    started: int = 0
    linked_aligned: int = 0
    linked: int = 0
    aligned: int = 0
    waits: list[int] = field(default_factory=list)
    fragmented: list[int] = field(default_factory=list)


def simulate(placer: Placer, seed: int, steps: int, hosts: int, partitions: int) -> Result:
    cluster = make_cluster(hosts, partitions)
    stream = job_stream(seed, steps, sum(len(r.core_ids) for r in cluster.raylets))
    rng = random.Random(seed + 1)
    arrivals: dict[int, list[tuple[Job, int]]] = {}
    for step, job, duration in stream:
        arrivals.setdefault(step, []).append((job, duration))
    duration_of = {job.id: d for _, job, d in stream}
    arrived_at = {job.id: s for s, job, _ in stream}
    queue: list[Job] = []
    running: dict[str, Assignment] = {}
    ends: dict[int, list[str]] = {}
    r = Result()
    for step in range(steps):
        for jid in ends.pop(step, []):
            for raylet in cluster.raylets:
                raylet.release(f"{jid}/")
            running.pop(jid, None)
        queue += [job for job, _ in arrivals.get(step, [])]
        placed = placer(cluster, queue, running, rng)
        for job in list(queue):
            if job.id not in placed:
                continue
            grants = [
                (rl.host, rl.grant(f"{job.id}/{i}", job.devices_per_worker)) for i, rl in enumerate(placed[job.id])
            ]
            linked, aligned = judge(cluster, job, grants)
            r.started += 1
            r.linked += linked
            r.aligned += aligned
            r.linked_aligned += linked and aligned
            r.waits.append(step - arrived_at[job.id])
            ends.setdefault(step + duration_of[job.id], []).append(job.id)
            queue.remove(job)
        r.fragmented.append(sum(rl.fragmented() for rl in cluster.raylets))
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="300 steps, 2 seeds")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.seeds = 300, 2
    placers: list[tuple[str, Placer]] = [("ray-default (PG PACK)", ray_pack_placer)]
    placers += [(name, policy_placer(name)) for name in POLICIES]
    rows = []
    for label, placer in placers:
        results = [simulate(placer, seed, args.steps, args.hosts, args.partitions) for seed in range(args.seeds)]
        rows.append(
            {
                "placement": label,
                "jobs_started": statistics.median(x.started for x in results),
                "linked_aligned": statistics.median(x.linked_aligned / max(1, x.started) for x in results),
                "linked": statistics.median(x.linked / max(1, x.started) for x in results),
                "aligned": statistics.median(x.aligned / max(1, x.started) for x in results),
                "mean_wait": statistics.median(statistics.fmean(x.waits or [0]) for x in results),
                "fragmented": statistics.median(statistics.fmean(x.fragmented) for x in results),
            }
        )
    base = rows[0]
    ratios = [
        {
            "placement": row["placement"],
            "linked_aligned_ratio": row["linked_aligned"] / max(1e-9, base["linked_aligned"]),
            "mean_wait_ratio": row["mean_wait"] / max(1e-9, base["mean_wait"]),
            "fragmented_ratio": row["fragmented"] / max(1e-9, base["fragmented"]),
        }
        for row in rows[1:]
    ]
    meta = {"steps": args.steps, "seeds": args.seeds, "hosts": args.hosts, "partitions": args.partitions}
    if args.json:
        print(json.dumps({**meta, "preset": PRESET, "rows": rows, "ratios": ratios}, indent=2))
        return
    cores = load_spec(PRESET).devices
    total = args.hosts * sum(len(d.core_ids) for d in cores)
    print(
        f"{args.hosts} x {PRESET} split into {args.partitions} ({total} cores), {args.steps} steps, "
        f"medians over {args.seeds} seeds; baseline: Ray's placement group PACK without selectors"
    )
    print(
        render(
            ["PLACEMENT", "JOBS", "LINKED+ALIGNED", "LINKED", "ALIGNED", "MEAN WAIT", "FRAGMENTED PARTITIONS"],
            [
                [
                    row["placement"],
                    row["jobs_started"],
                    f"{row['linked_aligned']:.1%}",
                    f"{row['linked']:.1%}",
                    f"{row['aligned']:.1%}",
                    f"{row['mean_wait']:.2f}",
                    f"{row['fragmented']:.2f}",
                ]
                for row in rows
            ],
        )
    )
    for x in ratios:
        print(
            f"{x['placement']}: linked+aligned {x['linked_aligned_ratio']:.2f}x the baseline, "
            f"mean wait {x['mean_wait_ratio']:.2f}x, fragmented partitions {x['fragmented_ratio']:.2f}x"
        )


if __name__ == "__main__":
    run_main(main)
