"""Question: how do `ray-accel status --cluster`, `ray-accel top` and a
placement decision scale with the number of partitions in the cluster: 8, 64
and 512?

Synthetic part (no Ray): hosts of 8 partitions each (mock trn1.32xlarge
split into 8, 4 NeuronCores on 2 linked devices per partition), as the GCS
reports them: one `ray.nodes()` entry per partition raylet (`NodeID`,
`Alive`, `NodeManagerAddress`, `NodeManagerHostname`, ports, `Resources`,
`Labels` with the partition and topology labels `ray-accel start` writes,
and Ray's own), plus the per-node available resources (a fixed pattern of
cores in use, shifted from host to host), plus one dead raylet per 8 hosts
that a live one has replaced (a recovered partition leaves its predecessor
in the GCS). Each
partition's exporter snapshot is built from the same values an exporter
produces: the mock backend's device readings for its devices, two Ray
workers (a worker and one child process each, device memory on its first
device) and, on every 64th partition, an orphan. Timed per call, each the
pure part of a CLI command or of a placement:

- `status --cluster --json`: the GCS node table turned into what
  `gcs_nodes` returns, `cluster_view`, `json_text` (as the CLI prints it);
  `status --cluster` (text): `cluster_view` and its table;
- `top --once --json`: `cluster_view` over the GCS's node table, `top_payload`
  with every partition's snapshot, `json_text`; `top --once` (text): the
  same payload rendered (without the jobs table: the job store is live state);
- placement: `view_from_nodes` (the live free model) alone, then that view and
  `allocate` of one job of 4 workers x 4 cores (one host's linked
  partitions) for each policy, then that view and `optimize` of a queue of
  16 pending jobs (1 to 8 workers of 1, 2 or 4 cores) for each policy.

Each figure is the median of --repeats calls after one untimed call, in CPU
seconds of this process (`time.process_time`): the calls are pure,
single-threaded and do no I/O, so on an idle machine that is their wall time,
and on a shared one it leaves out the time other processes take the core.
The growth ratios 64/8 and 512/64 are read against linear growth (8x per
step: 8 times the partitions); below it a fixed cost still dominates; above
1.5 times it (12x) the call is listed as superlinear (beyond sorting's
n log n and noise).

Real part: one real cluster at the small end, mock trn1.32xlarge split into 8
by `ray-accel start --head --partitions 8 --no-dashboard -- --num-cpus 8`
(`--num-cpus 8`: one CPU for every partition, whatever the host has). The real
`ray-accel status --cluster --json` and `ray-accel top --once --json`
commands are timed as a user runs them (a new process each: interpreter,
imports, GCS query; `top` also connects a driver and asks every exporter),
against the floor `ray-accel --version` (interpreter and CLI imports only),
measured in the same run. A start that fails at run time (Ray allows a
raylet 30 s to register, which 8 at once on a small busy machine can miss)
has stopped itself and is made once more, and the table says so. The
cluster is stopped with `ray-accel stop` however the run ends.

    python benchmarks/bench_cluster.py [--repeats 50] [--real-runs 5] [--no-real] [--quick] [--json]

`--quick`: 5 repeats, 2 real runs of each command (no warm-up call), the same
sizes, and a real cluster of 2 partitions (the same commands and code path;
a cluster of 8 costs CI's 2 cores some 40 CPU-seconds to start).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ray_accel_mock import MockPlugin
from ray_accel_mock.spec import load_spec

from benchmarks.harness import CliCluster, StartFailed, median_of, run_main, say, timed
from ray_accel.cli.output import json_text
from ray_accel.cli.render import cluster_status_text, render, top_text
from ray_accel.cli.top import top_payload
from ray_accel.cluster.status import ClusterView, cluster_view
from ray_accel.core.hosts import HostId
from ray_accel.metrics.collect import OrphanReading, ProcessReading, Snapshot, WorkloadReading, device_readings
from ray_accel.partition.plan import PARTITION_LABEL, plan_partitions, topology_labels
from ray_accel.placement.live import NODE_ID_LABEL, view_from_nodes
from ray_accel.placement.model import Job
from ray_accel.placement.policies import POLICIES, Policy, get_policy
from ray_accel.rayapi.gcs import GcsNode

PRESET = "trn1.32xlarge"
PER_HOST = 8
SIZES = (8, 64, 512)
LINEAR = 8.0  # each size is 8 times the one before
SUPERLINEAR = 1.5 * LINEAR
GCS_ADDRESS = "10.0.0.1:6379"
MIB = 1 << 20
# Cores in use per partition, shifted by one per host: every host keeps 5 of
# its 8 partitions wholly free, so the spanning job below always fits.
IN_USE = (0, 1, 0, 0, 2, 0, 4, 0)


@dataclass(frozen=True)
class Synthetic:
    """One cluster as Ray and the exporters would report it."""

    nodes: list[dict[str, Any]]  # what `ray.nodes()` returns
    available: dict[str, dict[str, float]]  # what `available_resources_per_node()` returns
    snapshots: dict[str, dict[str, Any]]  # node id -> the exporter's `snapshot()`
    partitions: int


def node_id(rng: random.Random) -> str:
    return rng.randbytes(28).hex()  # Ray's node ids: 28 bytes, in hex


def synthetic(partitions: int, seed: int = 0) -> Synthetic:
    rng = random.Random(seed)
    spec = load_spec(PRESET)
    plugin = MockPlugin(spec)
    accel = plugin.host_info().accelerator_type
    plan = plan_partitions(spec.devices, "auto-split", PER_HOST, traits=plugin.traits)
    by_id = {d.id: d for d in spec.devices}
    nodes: list[dict[str, Any]] = []
    available: dict[str, dict[str, float]] = {}
    snapshots: dict[str, dict[str, Any]] = {}
    pid = 1000
    live = 0
    for h in range(partitions // PER_HOST):
        host, ip = f"host-{h:03d}", f"10.{h // 250}.{h % 250}.1"
        key = HostId(host, ip).key  # how every view and series names the host
        labels = topology_labels(plan.partitions, spec.devices, HostId(host, ip), spec.family, "neuron_cores")
        for i, part in enumerate(plan.partitions):
            units = float(len(part.core_ids))
            resources = {
                "CPU": 8.0,
                f"node:{ip}": 1.0,
                "memory": 64.0 * 2**30,
                "object_store_memory": 16.0 * 2**30,
                "neuron_cores": units,
                f"accelerator_type:{part.accelerator_type}": 1.0,
            }
            dead = i == 0 and h % 8 == 0  # this partition was recovered: its predecessor died
            for alive in (False, True) if dead else (True,):
                nid = node_id(rng)
                ports = 21000 + 1000 * i
                nodes.append(
                    {
                        "NodeID": nid,
                        "Alive": alive,
                        "alive": alive,
                        "NodeManagerAddress": ip,
                        "NodeManagerHostname": host,
                        "NodeName": ip,
                        "NodeManagerPort": ports,
                        "ObjectManagerPort": ports + 1,
                        "DashboardAgentListenPort": ports + 2,
                        "MetricsAgentPort": ports + 3,
                        "RuntimeEnvAgentPort": ports + 4,
                        "MetricsExportPort": ports + 5,
                        "DeathReason": 0 if alive else 1,
                        "DeathReasonMessage": "" if alive else "raylet died",
                        "Resources": resources,
                        "Labels": {
                            PARTITION_LABEL: part.name,
                            **labels[part.name],
                            NODE_ID_LABEL: nid,
                            "ray.io/accelerator-type": part.accelerator_type or "",
                        },
                    }
                )
                if not alive:
                    continue
                used = IN_USE[(i + h) % len(IN_USE)]
                available[nid] = {**resources, "neuron_cores": units - used, "CPU": 8.0 - min(8, used)}
                devices = [by_id[d] for d in part.device_ids]
                readings, errors = device_readings(plugin.telemetry, devices, part.name, accel, key)
                workloads = []
                for _ in range(2):
                    procs = (
                        ProcessReading(pid, "ray::TrainWorker", 12.5, 800 * MIB, {devices[0].id: 64 * MIB}),
                        ProcessReading(pid + 1, "python", 1.5, 100 * MIB, {}),
                    )
                    workloads.append(WorkloadReading(f"ray::TrainWorker.train[{pid}]", key, part.name, pid, procs))
                    pid += 2
                orphans = (
                    (OrphanReading(devices[0].id, key, part.name, pid, "python stray.py"),) if live % 64 == 0 else ()
                )
                pid += 1
                live += 1
                snap = Snapshot(
                    host=key,
                    node_id=nid,
                    partition=part.name,
                    taken_at=time.time(),
                    took_s=0.002,
                    devices=tuple(readings),
                    workloads=tuple(workloads),
                    orphans=orphans,
                    errors=tuple(errors),
                )
                snapshots[nid] = snap.to_json()
    return Synthetic(nodes, available, snapshots, partitions)


def gcs_table(nodes: Sequence[Mapping[str, Any]], available: Mapping[str, Mapping[str, float]]) -> dict[str, GcsNode]:
    """What `gcs.gcs_nodes` makes of the GCS's node table (a dead node has no totals)."""
    return {
        n["NodeID"]: GcsNode(
            node_id=n["NodeID"],
            alive=bool(n["Alive"]),
            total=dict(n["Resources"]) if n["Alive"] else {},
            available=dict(available.get(n["NodeID"], {})),
            labels=n.get("Labels", {}),
            ip=n.get("NodeManagerAddress", ""),
            hostname=n.get("NodeManagerHostname", ""),
        )
        for n in nodes
    }


def status_cluster(c: Synthetic) -> ClusterView:
    view = cluster_view(GCS_ADDRESS, gcs_table(c.nodes, c.available))
    if len(view.partitions) != c.partitions:  # the input is what it says it is
        raise SystemExit(f"status --cluster saw {len(view.partitions)} partitions of {c.partitions}")
    return view


def top(c: Synthetic) -> dict[str, Any]:
    parts = cluster_view(GCS_ADDRESS, gcs_table(c.nodes, c.available)).partitions
    payload = top_payload(parts, {p.node_id: c.snapshots[p.node_id] for p in parts if p.alive})
    if len(payload["devices"]) != 2 * c.partitions or payload["errors"]:
        raise SystemExit(f"top saw {len(payload['devices'])} devices, errors {payload['errors'][:3]}")
    return payload


SPANNING = Job(
    id="span", name="span", workers=4, devices_per_worker=4, family="neuron", resource="neuron_cores"
)  # 16 cores: 4 partitions of one host


def queue(n: int = 16, seed: int = 1) -> list[Job]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        per = rng.choice([1, 2, 4])
        out.append(
            Job(
                id=f"q{i}",
                name=f"q{i}",
                workers=rng.choice([1, 2, 4, 8]),
                devices_per_worker=per,
                family="neuron",
                resource="neuron_cores",
            )
        )
    return out


def calls(c: Synthetic) -> list[tuple[str, Callable[[], object]]]:
    pending = queue()
    out: list[tuple[str, Callable[[], object]]] = [
        ("status --cluster --json", lambda: json_text(status_cluster(c))),
        ("status --cluster (text)", lambda: cluster_status_text(status_cluster(c))),
        ("top --once --json", lambda: json_text(top(c))),
        ("top --once (text)", lambda: top_text(top(c))),
        ("placement: live view", lambda: view_from_nodes(c.nodes, c.available)),
    ]

    def allocate(policy: Policy) -> Callable[[], object]:
        return lambda: policy.allocate(SPANNING, view_from_nodes(c.nodes, c.available).partitions)

    def optimize(policy: Policy) -> Callable[[], object]:
        return lambda: policy.optimize(pending, view_from_nodes(c.nodes, c.available).partitions, {})

    out += [(f"placement: view + {name}.allocate (4x4)", allocate(get_policy(name))) for name in POLICIES]
    out += [
        (f"placement: view + {name}.optimize ({len(pending)} jobs)", optimize(get_policy(name))) for name in POLICIES
    ]
    return out


def measure_synthetic(repeats: int) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for size in SIZES:
        c = synthetic(size)
        say(f"synthetic: {size} partitions on {size // PER_HOST} hosts, {repeats} repeats per call")
        for name, fn in calls(c):
            median, _ = timed(fn, repeats, clock=time.process_time)
            rows.setdefault(name, {"call": name, "seconds": {}})["seconds"][size] = median
    out = []
    for row in rows.values():
        s = row["seconds"]
        row["growth"] = {f"{b}/{a}": s[b] / s[a] for a, b in pairwise(SIZES)}
        row["seconds"] = {str(k): v for k, v in s.items()}
        out.append(row)
    return out


REAL_CALLS = (
    ("ray-accel --version (floor)", ("--version",)),
    ("ray-accel status --cluster --json", ("status", "--cluster", "--json")),
    ("ray-accel top --once --json", ("top", "--once", "--json")),
)


def measure_real(runs: int, warm: bool, partitions: int) -> dict[str, Any]:
    with CliCluster(PRESET, partitions, ["--no-dashboard", "--", "--num-cpus", str(partitions)]) as cluster:
        say(f"real: starting {partitions} partitions")
        # Ray gives each raylet 30 s to appear in the GCS (node.py,
        # raylet_start_wait_time_s); 8 starting at once on a small, busy
        # machine can miss it. Such a start stops itself; one more is made.
        try:
            took = cluster.start(attempts=2)
        except StartFailed as e:
            raise SystemExit(f"real cluster: {e}") from None
        say(f"real: {partitions} partitions up in {took:.1f} s (attempt {cluster.attempts})")
        rows: list[dict[str, Any]] = []
        for name, args in REAL_CALLS:
            samples = []
            for i in range(runs + warm):
                began = time.perf_counter()
                proc = cluster.cli(*args)
                seconds = time.perf_counter() - began
                if proc.returncode != 0:
                    raise SystemExit(f"{name} failed ({proc.returncode}): {proc.stderr[-2000:]}")
                if i >= warm:
                    samples.append(seconds)
            shown = None
            if "--json" in args:
                shown = len(json.loads(proc.stdout)["partitions"])
            rows.append({"call": name, "median_s": median_of(samples), "runs_s": samples, "partitions_shown": shown})
    say("real: stopped")
    floor = rows[0]["median_s"]
    for r in rows:
        r["over_floor"] = r["median_s"] / floor
    return {"partitions": partitions, "start_s": took, "start_attempts": cluster.attempts, "runs": runs, "rows": rows}


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=50, help="timed calls per synthetic figure")
    ap.add_argument("--real-runs", type=int, default=5, help="timed runs of each real CLI command")
    ap.add_argument("--no-real", action="store_true", help="skip the real cluster")
    ap.add_argument("--quick", action="store_true", help="5 repeats, 2 real runs of 2 partitions, no warm-up call")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    repeats = 5 if args.quick else args.repeats
    real_runs = 2 if args.quick else args.real_runs
    rows = measure_synthetic(repeats)
    real_partitions = 2 if args.quick else PER_HOST
    real = None if args.no_real else measure_real(real_runs, warm=not args.quick, partitions=real_partitions)
    superlinear = [r["call"] for r in rows if r["growth"]["512/64"] > SUPERLINEAR]
    if args.json:
        out = {"sizes": SIZES, "per_host": PER_HOST, "repeats": repeats, "clock": "process_time", "rows": rows}
        out |= {"linear": LINEAR, "superlinear_above": SUPERLINEAR, "superlinear": superlinear}
        print(json.dumps({**out, "real": real}, indent=2))
        return
    print(
        f"CPU time per call (median of {repeats}) against partitions in the cluster "
        f"(hosts of {PER_HOST}: mock {PRESET} split 8); growth against linear ({LINEAR:.0f}x per step)"
    )
    print(
        render(
            ["CALL", *(f"{n} PARTS" for n in SIZES), "64/8", "512/64"],
            [
                [
                    r["call"],
                    *(ms(r["seconds"][str(n)]) for n in SIZES),
                    f"{r['growth']['64/8']:.1f}x",
                    f"{r['growth']['512/64']:.1f}x",
                ]
                for r in rows
            ],
        )
    )
    print(f"superlinear (512/64 above {SUPERLINEAR:g}x): " + (", ".join(superlinear) or "none"))
    if real is None:
        return
    print()
    print(
        f"real cluster: {real['partitions']} partitions (mock {PRESET}, started in {real['start_s']:.1f} s"
        + (f" at attempt {real['start_attempts']}" if real["start_attempts"] > 1 else "")
        + "), "
        f"median of {real['runs']} run(s) of each command; baseline: the floor `ray-accel --version`"
    )
    synthetic_at_8 = {r["call"]: r["seconds"][str(SIZES[0])] for r in rows}
    print(
        render(
            ["COMMAND", "MEDIAN", "RUNS", "PARTITIONS SHOWN", "VS FLOOR", "PURE PART AT 8"],
            [
                [
                    r["call"],
                    ms(r["median_s"]),
                    " ".join(f"{x:.2f}" for x in r["runs_s"]),
                    r["partitions_shown"],
                    f"{r['over_floor']:.2f}x",
                    next(
                        (ms(v) for k, v in synthetic_at_8.items() if r["call"].endswith(k)),
                        None,
                    ),
                ]
                for r in real["rows"]
            ],
        )
    )


if __name__ == "__main__":
    run_main(main)
