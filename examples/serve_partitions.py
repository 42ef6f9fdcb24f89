"""Ray Serve on a partitioned host: one replica per partition, one request each.

    python examples/serve_partitions.py [--partitions N] [--port P]

1. Discover this host's accelerators (the mock trn1.32xlarge when none).
2. `ray-accel start --head --partitions N` (4 by default): one raylet per partition.
3. One Serve deployment of N replicas, each asking a whole partition's
   accelerators and no CPU, at most one per Ray node (a partition is a Ray
   node), so one per partition: Ray's own options, nothing else.
4. HTTP requests to the host's Serve port until every replica has answered;
   print each replica's partition and visible devices, and check that they
   are disjoint and inside the replica's partition.
5. `serve.shutdown()`, then stop exactly the processes that were started.

Exit 0 when every replica answered with its own devices, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ray_accel.cli.render import render  # noqa: E402
from ray_accel.cluster.host import free_port  # noqa: E402
from ray_accel.cluster.raylet import Join, RayOptions, Split, StartRequest  # noqa: E402
from ray_accel.cluster.start import start  # noqa: E402
from ray_accel.cluster.status import HostStatus  # noqa: E402
from ray_accel.cluster.status import status as host_status  # noqa: E402
from ray_accel.cluster.stop import stop  # noqa: E402
from ray_accel.core.errors import RayAccelError  # noqa: E402
from ray_accel.core.visibility import VisibilityError, parse_visible_ids  # noqa: E402
from ray_accel.plugins.discovery import discover  # noqa: E402

VISIBLE_VARS = ("NEURON_RT_VISIBLE_CORES", "CUDA_VISIBLE_DEVICES")
PARTITION_LABEL = "ray-accel.io/partition"


def say(msg: str) -> None:
    print(msg, flush=True)


def id_set(mask: str) -> set[str]:
    """A mask's ids as text: ranges expanded for indexes (`0-3` -> 0..3), GPU UUIDs as written."""
    try:
        ids = parse_visible_ids(mask)
    except VisibilityError:
        return {token.strip() for token in mask.split(",")}
    return {str(i) for i in ids or ()}


def build_app(replicas: int, resource: str, per_replica: int) -> Any:
    """One deployment whose replicas say which partition they run on and what they see."""
    import ray
    from ray import serve

    if resource == "GPU":
        actor_options: dict[str, Any] = {"num_gpus": per_replica, "num_cpus": 0}
    else:
        actor_options = {"resources": {resource: per_replica}, "num_cpus": 0}

    # max_replicas_per_node counts Ray nodes, and each partition is one.
    @serve.deployment(num_replicas=replicas, max_replicas_per_node=1, ray_actor_options=actor_options)
    class Where:
        def __call__(self, request: Any) -> dict[str, Any]:
            partition = ray.get_runtime_context().get_node_labels().get(PARTITION_LABEL)
            return {
                "replica": serve.get_replica_context().replica_id.unique_id,
                "partition": partition,
                "visible": next((os.environ[v] for v in VISIBLE_VARS if v in os.environ), None),
                "pid": os.getpid(),
            }

    # `serve.deployment` turns the class into a Deployment, which mypy does not see.
    return Where.bind()  # type: ignore[attr-defined]


def serve_one_per_partition(status: HostStatus, resource: str, port: int) -> bool:
    """Deploy, ask until every replica answered, check and print; True if all is as promised."""
    import ray
    from ray import serve

    parts = {p.partition: p for p in status.partitions}
    per_replica = min(len(p.core_ids) for p in parts.values())
    os.environ.update(status.env)  # what `ray-accel status --json` tells any driver (token auth)
    ray.init(address=status.gcs_address, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        say(f"\n== {len(parts)} replicas x {per_replica} {resource}, at most one per partition")
        started = time.monotonic()
        serve.run(build_app(len(parts), resource, per_replica), name="where", route_prefix="/")
        say(f"   deployed in {time.monotonic() - started:.1f}s; asking http://127.0.0.1:{port}/")
        replies: dict[str, dict[str, Any]] = {}
        for _ in range(50 * len(parts)):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as reply:
                body = json.loads(reply.read())
            replies[body["replica"]] = body
            if len(replies) == len(parts):
                break
        app = serve.status().applications["where"]
        say(f"   serve status: {getattr(app.status, 'value', app.status)}")
    finally:
        serve.shutdown()
        ray.shutdown()
    return check(replies, parts)


def check(replies: dict[str, dict[str, Any]], parts: dict[str, Any]) -> bool:
    rows = []
    ok = len(replies) == len(parts)
    seen: set[str] = set()
    for r in sorted(replies.values(), key=lambda r: str(r["partition"])):
        part = parts.get(r["partition"])
        visible = id_set(r["visible"] or "")
        inside = part is not None and visible <= id_set(part.visible_ids)
        disjoint = not visible & seen
        seen |= visible
        ok = ok and inside and disjoint and bool(visible)
        verdict = "own devices" if inside and disjoint else "NOT its own devices"
        rows.append([r["partition"], r["replica"], r["pid"], r["visible"], verdict])
    say(render(["PARTITION", "REPLICA", "PID", "VISIBLE", "CHECK"], rows))
    say(f"   {len(replies)} of {len(parts)} replicas answered")
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--port", type=int, default=None, help="Serve's HTTP port (default: a free one)")
    args = parser.parse_args(argv)
    if args.partitions < 1:
        parser.error(f"--partitions {args.partitions}: expected at least 1")
    started = time.monotonic()
    if discover().primary is None and "RAYACCEL_MOCK" not in os.environ:
        say("no accelerator found on this machine: using the mock trn1.32xlarge")
        os.environ["RAYACCEL_MOCK"] = "trn1.32xlarge"
    plugin = discover().primary
    if plugin is None:
        print("no active backend", file=sys.stderr)
        return 1
    info = plugin.host_info()
    work = Path(tempfile.mkdtemp(prefix="ray-accel-serve-"))
    os.environ["RAYACCEL_STATE_DIR"] = str(work / "state")
    say(f"== host: {info.device_count} x {info.accelerator_type}; starting {args.partitions} partitions")
    request = StartRequest(
        join=Join(head=True, port=free_port()),
        split=Split(partitions=args.partitions),
        ray=RayOptions.read(["--num-cpus", "2"]),
    )
    ok = False
    failure: str | None = None
    try:
        start(request, lambda m: say(f"   {m}"))
        ok = serve_one_per_partition(host_status(), info.resource_name, args.port or free_port())
    except (RayAccelError, OSError) as e:
        failure = f"{type(e).__name__}: {e}"
    finally:
        say("\n== teardown")
        try:
            say(f"   {stop(grace_s=3).message} (by PID)")
        except RayAccelError as e:  # reported, but never in place of the first error
            say(f"   teardown failed: {e}")
            ok = False
    if failure is not None:
        print(f"\nserve example FAILED: {failure}", file=sys.stderr)
        return 1
    say(f"\nserve example {'finished' if ok else 'FAILED'} in {time.monotonic() - started:.0f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
