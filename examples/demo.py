"""`make demo`: a partitioned local cluster, two training jobs at once, teardown.

1. Discover this host's accelerators (the mock trn1.32xlarge when none).
2. `ray-accel start --head --partitions 2`: one raylet per partition.
3. A 2-worker TorchTrainer with AcceleratorTorchConfig in each partition, both
   at the same time; print every worker's ranks and devices and the loss.
4. Stop exactly the processes that were started.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ray_accel.cli.render import gib, render  # noqa: E402
from ray_accel.cluster.host import free_port  # noqa: E402
from ray_accel.cluster.raylet import (  # noqa: E402
    Join,
    RayOptions,
    Split,
    StartRequest,
)
from ray_accel.cluster.start import start  # noqa: E402
from ray_accel.cluster.status import status as host_status  # noqa: E402
from ray_accel.cluster.stop import stop  # noqa: E402
from ray_accel.core.errors import RayAccelError  # noqa: E402
from ray_accel.core.visibility import format_visible_ids  # noqa: E402
from ray_accel.plugins.discovery import discover  # noqa: E402


def say(msg: str) -> None:
    print(msg, flush=True)


def main() -> int:
    started = time.monotonic()
    if discover().primary is None and "RAYACCEL_MOCK" not in os.environ:
        say("no accelerator found on this machine: using the mock trn1.32xlarge")
        os.environ["RAYACCEL_MOCK"] = "trn1.32xlarge"
    plugin = discover().primary
    if plugin is None:
        print("no active backend", file=sys.stderr)
        return 1
    info = plugin.host_info()
    say(
        f"\n== host: {info.device_count} x {info.accelerator_type}, "
        f"{info.core_count} {info.resource_name} ({plugin.name})"
    )
    say(
        render(
            ["DEVICE", "MODEL", "CORES", "MEMORY", "NUMA", "PEERS"],
            [
                [
                    d.id,
                    d.model,
                    format_visible_ids(d.core_ids, "ranges"),
                    gib(d.memory_bytes),
                    d.numa_node,
                    len(d.peers),
                ]
                for d in plugin.list_devices()
            ],
        )
    )
    work = Path(tempfile.mkdtemp(prefix="ray-accel-demo-"))
    os.environ["RAYACCEL_STATE_DIR"] = str(work / "state")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    say("\n== starting one raylet per partition")
    request = StartRequest(
        join=Join(head=True, port=free_port()), split=Split(partitions=2), ray=RayOptions.read(["--num-cpus", "2"])
    )
    ok = False
    failure: str | None = None
    try:
        start(request, lambda m: say(f"   {m}"))
        ok = train_both(work, info.resource_name)
    except (RayAccelError, OSError, subprocess.SubprocessError) as e:
        failure = f"{type(e).__name__}: {e}"
    finally:
        say("\n== teardown")
        try:
            result = stop(grace_s=3)
            say(f"   {result.message} (by PID)")
        except RayAccelError as e:  # reported, but never in place of the first error
            say(f"   teardown failed: {e}")
            ok = False
    if failure is not None:
        print(f"\ndemo FAILED: {failure}", file=sys.stderr)
        return 1
    say(f"\ndemo {'finished' if ok else 'FAILED'} in {time.monotonic() - started:.0f}s; files in {work}")
    return 0 if ok else 1


def train_both(work: Path, resource: str) -> bool:
    """One 2-worker job per partition, both at once; True if both trained to
    identical weights on their two ranks."""
    status = host_status()
    address = status.gcs_address
    if address is None:
        raise RayAccelError("the started host records no GCS address")
    say(
        render(
            ["PARTITION", "RAYLET PID", "CORES", "MASK"],
            [[p.partition, p.pid, format_visible_ids(p.core_ids, "ranges"), p.visible_ids] for p in status.partitions],
        )
    )
    gpu = resource == "GPU"
    say("\n== two 2-worker training jobs, one per partition, at the same time")
    env = {**os.environ, **status.env}  # what `ray-accel status --json` tells any driver

    def run(part: str) -> subprocess.CompletedProcess[str]:
        cmd = [
            sys.executable, str(ROOT / "examples" / "train_partitions.py"), "--address", address,
            "--partition", part, "--out", str(work / part), "--resource", resource,
            "--per-worker", "1" if gpu else "2",
        ]  # fmt: skip
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        procs = dict(zip(("p0", "p1"), pool.map(run, ("p0", "p1")), strict=True))
    ok = True
    rows = []
    for part, proc in procs.items():
        if proc.returncode != 0:
            ok = False
            say(f"job in {part} failed:\n{proc.stderr[-2000:]}")
            continue
        reports = [json.loads((work / part / f"rank{r}.json").read_text()) for r in (0, 1)]
        for r in reports:
            losses = r["losses"]
            rows.append(
                [
                    part, r["world_rank"], r["local_rank"], r["local_world_size"], r["node_rank"], r["visible"],
                    r["backend"], f"{losses[0]:.3f} -> {losses[len(losses) // 2]:.3f} -> {losses[-1]:.4f}",
                ]
            )  # fmt: skip
        same = reports[0]["weights"] == reports[1]["weights"]
        ok = ok and same
        say(f"   {part}: weights identical on both ranks: {'yes' if same else 'NO'}")
    say(render(["PARTITION", "RANK", "LOCAL", "LOCAL WS", "NODE", "VISIBLE", "BACKEND", "LOSS"], rows))
    return ok


if __name__ == "__main__":
    sys.exit(main())
