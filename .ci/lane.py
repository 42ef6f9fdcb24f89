"""What a user of the installed wheels does, run by a venv that has them
(never the checkout: `.ci/wheel-lanes` makes the venv, runs this from outside
the checkout and without PYTHONPATH).

    python lane.py STATE_DIR [--fit] [--drain]

1. `ray-accel devices --json` lists every backend (cuda, mock, neuron).
2. `ray-accel start --head --partitions 2` on the mock trn1.32xlarge, inside
   the inherited mask 4-27 (ranges, which Ray's own manager does not read);
   it fails if `start` says the bridge is not installed.
3. A task per partition holding all its NeuronCores sees the mask ray-accel's
   manager writes: the partition's cores as `ray-accel status` computes them,
   sorted as numbers (Ray's own manager sorts them as text: 10 before 4).
4. With --fit: a two-worker TorchTrainer fit with AcceleratorTorchConfig
   (gloo, CPU) in one partition (the venv needs torch).
5. With --drain: a drain of the other partition through ray-accel's seam to
   Ray's GCS, which must record it (no torch needed).
6. `ray-accel stop`, always: on an error, Ctrl-C or SIGTERM too.

Prints one line per step; any failed check exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BACKENDS = {"cuda", "mock", "neuron"}
PARTITION_LABEL = "ray-accel.io/partition"
# The mask `start` inherits, in ranges (Ray's own manager reads no ranges).
INHERITED = "4-27"


STARTED = time.monotonic()


def say(msg: str) -> None:
    print(f"lane {time.monotonic() - STARTED:5.1f}s: {msg}", flush=True)


def check(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"lane: FAILED: {what}")


def cli(*args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).parent / "ray-accel")
    with subprocess.Popen([exe, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            # Interrupted or out of time: SIGTERM lets a half-done `start`
            # stop what it started (subprocess.run would SIGKILL it).
            proc.terminate()
            proc.communicate(timeout=120)
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def cli_json(*args: str) -> Any:
    proc = cli(*args, "--json")
    check(proc.returncode == 0, f"ray-accel {' '.join(args)} --json exited {proc.returncode}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def installed_not_checkout() -> None:
    import importlib.metadata

    import ray_accel

    where = Path(ray_accel.__file__).resolve()
    check("site-packages" in where.parts, f"ray_accel is imported from {where}, not from the installed wheel")
    say(f"ray-accel {ray_accel.__version__} from {where.parent}, Ray {importlib.metadata.version('ray')}")


def devices() -> None:
    listed = {b["name"] for b in cli_json("devices")["plugins"]}
    check(BACKENDS <= listed, f"devices --json lists backends {sorted(listed)}, not all of {sorted(BACKENDS)}")
    say(f"devices --json lists the backends {', '.join(sorted(listed))}")


def start() -> None:
    args = ("start", "--head", "--partitions", "2", "--port", str(free_port()), "--no-metrics", "--no-dashboard")
    proc = cli(*args, env={**os.environ, "NEURON_RT_VISIBLE_CORES": INHERITED})
    out = proc.stdout + proc.stderr
    check(proc.returncode == 0, f"start exited {proc.returncode}:\n{out[-3000:]}")
    check("bridge is not installed" not in out, f"start ran without the bridge:\n{out[-3000:]}")
    say(f"started two partitions with the bridge, in the inherited mask {INHERITED}")


def tasks(status: dict[str, Any]) -> None:
    import ray

    from ray_accel.core.visibility import format_visible_ids, parse_visible_ids

    @ray.remote(num_cpus=0)
    def seen() -> dict[str, Any]:
        import ray_accel

        return {"mask": os.environ.get("NEURON_RT_VISIBLE_CORES"), "ray_accel": ray_accel.__file__}

    parts = status["partitions"]
    cores = sorted(c for p in parts for c in p["core_ids"])
    check(cores == list(range(4, 28)), f"the partitions hold cores {cores}, not those of the mask {INHERITED}")
    refs = [
        seen.options(
            resources={"neuron_cores": len(p["core_ids"])}, label_selector={PARTITION_LABEL: p["partition"]}
        ).remote()
        for p in parts
    ]
    for p, got in zip(parts, ray.get(refs, timeout=180), strict=True):
        want = format_visible_ids(p["core_ids"])
        check("site-packages" in Path(got["ray_accel"]).parts, f"a worker imports ray_accel from {got['ray_accel']}")
        check(
            got["mask"] == want,
            f"{p['partition']}: the task's mask is {got['mask']!r}, ray-accel's manager writes {want!r}",
        )
        check(
            parse_visible_ids(p["visible_ids"]) == sorted(p["core_ids"]),
            f"{p['partition']}: raylet mask {p['visible_ids']!r} is not its cores",
        )
        say(f"{p['partition']} (raylet mask {p['visible_ids']}): its task saw {got['mask']}")


def fit_loop(config: dict[str, Any]) -> None:
    import torch

    from ray_accel.train import get_context, sync_gradients

    ctx = get_context()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(ctx.world_rank)  # each rank its own data
    for _ in range(config["steps"]):
        x = torch.randn(16, 4, generator=data)
        opt.zero_grad()
        ((model(x).squeeze(-1) - x.sum(-1)) ** 2).mean().backward()
        sync_gradients(model)
        opt.step()
    report = {
        "partition": ctx.partition,
        "world_size": ctx.world_size,
        "backend": ctx.backend,
        "mask": os.environ.get("NEURON_RT_VISIBLE_CORES"),
        "weights": torch.cat([p.detach().flatten() for p in model.parameters()]).tolist(),
    }
    # Ray Train keeps only what rank 0 reports: each rank writes its own.
    Path(config["out"], f"rank{ctx.world_rank}.json").write_text(json.dumps(report))


def fit(status: dict[str, Any], out: Path) -> None:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from ray_accel.core.visibility import parse_visible_ids
    from ray_accel.train import AcceleratorTorchConfig

    part = status["partitions"][0]
    out.mkdir(parents=True)
    TorchTrainer(
        fit_loop,
        train_loop_config={"steps": 3, "out": str(out)},
        torch_config=AcceleratorTorchConfig(backend="gloo"),
        scaling_config=ScalingConfig(
            num_workers=2,
            resources_per_worker={"CPU": 0, "neuron_cores": 2},
            label_selector={PARTITION_LABEL: part["partition"]},
        ),
        run_config=RunConfig(name="lane-fit", storage_path=str(out / "ray_results")),
    ).fit()
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    masks = [parse_visible_ids(r["mask"]) or [] for r in ranks]
    for r in ranks:
        check((r["partition"], r["world_size"], r["backend"]) == (part["partition"], 2, "gloo"), f"a rank saw {r}")
    check(
        sorted(masks[0] + masks[1]) == sorted(set(masks[0] + masks[1])) and len(masks[0] + masks[1]) == 4,
        f"the ranks' masks {[r['mask'] for r in ranks]} are not two cores each, apart",
    )
    check(set(masks[0] + masks[1]) <= set(part["core_ids"]), f"the ranks' masks are not in {part['partition']}")
    check(ranks[0]["weights"] == ranks[1]["weights"], "the two ranks trained to different weights")
    say(f"fit: 2 gloo workers in {part['partition']} on cores {ranks[0]['mask']} and {ranks[1]['mask']}, same weights")


def drain(status: dict[str, Any]) -> None:
    import ray

    from ray_accel.rayapi import gcs

    part, address = status["partitions"][1], status["gcs_address"]

    # Ray stops a drained raylet at once when nothing runs there: this keeps it draining.
    @ray.remote(num_cpus=0, resources={"neuron_cores": 1})
    class Busy:
        def ready(self) -> bool:
            return True

    busy = Busy.options(label_selector={PARTITION_LABEL: part["partition"]}).remote()
    ray.get(busy.ready.remote(), timeout=120)
    check(part["node_id"] not in draining_nodes(address), f"{part['partition']} drains before it is asked to")
    deadline_ms = int(time.time() * 1000) + 600_000
    reply = gcs.drain_node(address, part["node_id"], "ray-accel CI lane", deadline_ms, timeout_s=60)
    check(reply.accepted, f"the GCS refused the drain: {reply.rejection}")
    recorded: dict[str, int] = {}
    for _ in range(100):
        recorded = draining_nodes(address)
        if part["node_id"] in recorded:
            break
        time.sleep(0.1)
    check(recorded.get(part["node_id"]) == deadline_ms, f"the GCS records draining nodes {recorded}")
    say(f"drain: the GCS records {part['partition']} as draining until its deadline")


def draining_nodes(address: str) -> dict[str, int]:
    """Hex node id -> drain deadline (ms) of each node the GCS drains, read
    back as the tests read it (the product drains, and never reads them)."""
    from ray_accel.rayapi import gcs

    return {str(k): int(v) for k, v in dict(gcs._global_state(address).get_draining_nodes()).items()}


def stop() -> bool:
    proc = cli("stop", "--json", timeout=120)
    said = json.loads(proc.stdout)["message"] if proc.returncode == 0 else proc.stderr.strip()
    say(f"stop exited {proc.returncode}: {said}")
    return proc.returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("state_dir", type=Path)
    ap.add_argument("--fit", action="store_true", help="a TorchTrainer fit in the first partition (needs torch)")
    ap.add_argument("--drain", action="store_true", help="a drain of the second partition, recorded by the GCS")
    args = ap.parse_args()
    # SIGTERM takes Ctrl-C's path, so the finally below stops the cluster.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    os.environ.update(RAYACCEL_MOCK="trn1.32xlarge", RAYACCEL_STATE_DIR=str(args.state_dir / "state"))
    installed_not_checkout()
    devices()
    try:
        start()
        status = cli_json("status")
        # What a driver of this cluster needs (its token), read as Ray is imported.
        os.environ.update(status["env"])
        import ray

        ray.init(address=status["gcs_address"], log_to_driver=False)
        tasks(status)
        if args.fit:
            fit(status, args.state_dir / "fit")
        if args.drain:
            drain(status)
    finally:
        if "ray" in sys.modules:
            sys.modules["ray"].shutdown()
        stopped = stop()
    check(stopped, "stop failed")
    say("passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
