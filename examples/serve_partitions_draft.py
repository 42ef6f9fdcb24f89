"""The measuring script of docs/serving-findings.md: Ray Serve on a partitioned host, to see what Ray does.

    python examples/serve_partitions_draft.py --address ADDR --out DIR [--replicas N] [--cores C]
        [--max-per-node K] [--drain-seconds S]

Deploys one application whose replicas each ask `--cores` of the accelerator
resource (`--resource`, `neuron_cores` on Trainium) and no CPU, sends HTTP
requests to Serve's port on this host, and writes what it saw to
DIR/serve.json: which replicas answered, each one's visible cores, node id,
PID and replica rank, where Serve's proxies and controller run, and Serve's
status. With `--drain-seconds S` it then drains (through the GCS, as
`ray drain-node` does, reason preemption) the node of one replica while a
client sends about 10 requests a second, and counts failed requests for S
seconds after the drain.

Not a test and not an example of use (that is examples/serve_partitions.py):
it records what docs/serving-findings.md reports, with the commands there.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

VISIBLE_VARS = ("NEURON_RT_VISIBLE_CORES", "CUDA_VISIBLE_DEVICES")
# Serve's HTTP port, and the head's fallback proxy port (RAY_SERVE_FALLBACK_PROXY_HTTP_PORT).
SERVE_PORTS = (8000, 8500)
PARTITION_LABEL = "ray-accel.io/partition"


def build_app(replicas: int, resource: str, cores: int, max_per_node: int | None, partition: str | None) -> Any:
    """A deployment whose replicas say where they run and what they see;
    `partition`: pinned there through Ray's label selector."""
    import ray
    from ray import serve

    actor_options: dict[str, Any] = {"resources": {resource: cores}, "num_cpus": 0}
    if partition is not None:
        actor_options["label_selector"] = {PARTITION_LABEL: partition}
    options: dict[str, Any] = {"num_replicas": replicas, "ray_actor_options": actor_options}
    if max_per_node is not None:
        options["max_replicas_per_node"] = max_per_node

    @serve.deployment(**options)
    class Where:
        def __call__(self, request: Any) -> dict[str, Any]:
            context = serve.get_replica_context()
            rank = getattr(context, "rank", None)
            return {
                "visible": {name: os.environ.get(name) for name in VISIBLE_VARS},
                "node_id": ray.get_runtime_context().get_node_id(),
                "pid": os.getpid(),
                "replica": context.replica_id.unique_id,
                "rank": repr(rank),
            }

    return Where.bind()


def ask(url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """One GET; the answer's JSON, or the error as text."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            return {"ok": True, "body": json.loads(reply.read())}
    except Exception as e:  # every failure is what we count
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def where_everything_runs() -> dict[str, Any]:
    """Serve's actors (controller, proxies, replicas) with their nodes, and the nodes."""
    from ray.util.state import list_actors, list_nodes

    actors = [
        {"class": a.class_name, "name": a.name, "state": a.state, "node_id": a.node_id, "pid": a.pid}
        for a in list_actors(limit=1000)
        if any(part in (a.class_name or "") for part in ("Serve", "Proxy", "Where"))
    ]
    nodes = [
        {
            "node_id": n.node_id,
            "state": n.state,
            "ip": n.node_ip,
            "labels": n.labels,
            "resources": n.resources_total,
            "head": n.is_head_node,
        }
        for n in list_nodes(limit=100)
    ]
    return {"actors": actors, "nodes": nodes, "listeners": listeners(SERVE_PORTS)}


def listeners(ports: Sequence[int]) -> list[dict[str, Any]]:
    """Every process listening on one of `ports` on this host (several
    sockets on one port mean SO_REUSEPORT is in use)."""
    import psutil

    found = []
    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port in ports:
            found.append({"address": f"{c.laddr.ip}:{c.laddr.port}", "pid": c.pid})
    return found


def ask_on(connection: http.client.HTTPConnection) -> dict[str, Any]:
    """One GET on a kept-alive connection; the answer's JSON, or the error as text."""
    try:
        connection.request("GET", "/")
        reply = connection.getresponse()
        body = reply.read()
        if reply.status != 200:
            return {"ok": False, "error": f"HTTP {reply.status}"}
        return {"ok": True, "body": json.loads(body)}
    except Exception as e:  # every failure is what we count
        connection.close()
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


class Client:
    """A steady client: about `rate` requests a second, each result kept;
    `keep_alive`: all on one HTTP/1.1 connection (opened again after an error)."""

    def __init__(self, url: str, rate: float, keep_alive: bool = False) -> None:
        self.url = url
        self.period = 1.0 / rate
        self.keep_alive = keep_alive
        self.results: list[dict[str, Any]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", 8000, timeout=5.0)
        while not self.stop.is_set():
            started = time.time()
            if self.keep_alive:
                got = ask_on(connection)
            else:
                got = ask(self.url)
            got["t"] = started
            got["latency_s"] = time.time() - started
            self.results.append(got)
            self.stop.wait(max(0.0, self.period - (time.time() - started)))


def drain_one(address: str, node_id: str, deadline_s: float) -> dict[str, Any]:
    """Drain `node_id` through the GCS with reason preemption (ray-accel's seam)."""
    from ray_accel.rayapi.gcs import drain_node

    deadline_ms = int((time.time() + deadline_s) * 1000)
    reply = drain_node(address, node_id, "serve exploration drain", deadline_ms, 15.0)
    return {"accepted": reply.accepted, "rejection": reply.rejection, "deadline_ms": deadline_ms}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--resource", default="neuron_cores")
    parser.add_argument("--cores", type=int, default=8)
    parser.add_argument("--max-per-node", type=int, default=None)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--drain-seconds", type=float, default=0.0)
    parser.add_argument("--drain-deadline", type=float, default=60.0)
    parser.add_argument("--partition", default=None, help="pin every replica to this partition (label selector)")
    parser.add_argument("--clients", type=int, default=1, help="steady clients during the drain, 10 req/s each")
    parser.add_argument("--keep-alive", action="store_true", help="each client keeps one HTTP connection")
    args = parser.parse_args(argv)

    import ray
    from ray import serve

    args.out.mkdir(parents=True, exist_ok=True)
    ray.init(address=args.address)
    serve.start(http_options={"host": "127.0.0.1", "port": 8000})
    started = time.time()
    serve.run(
        build_app(args.replicas, args.resource, args.cores, args.max_per_node, args.partition),
        name="where",
        route_prefix="/",
    )
    deployed_s = time.time() - started
    url = "http://127.0.0.1:8000/"
    answers = [ask(url) for _ in range(args.requests)]
    replicas: dict[str, Any] = {}
    for a in answers:
        if a["ok"]:
            replicas[a["body"]["replica"]] = a["body"]
    report: dict[str, Any] = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "deployed_s": deployed_s,
        "requests": len(answers),
        "failed": [a["error"] for a in answers if not a["ok"]],
        "replicas": replicas,
        "placement": where_everything_runs(),
        "serve_status": str(serve.status()),
    }
    (args.out / "serve.json").write_text(json.dumps(report, indent=2, default=str))
    print(json.dumps({"answered_by": len(replicas), "failed": len(report["failed"])}))

    if args.drain_seconds > 0 and replicas:
        head_id = next(n["node_id"] for n in report["placement"]["nodes"] if n["head"])
        victim = next((r["node_id"] for r in replicas.values() if r["node_id"] != head_id), None)
        clients = [Client(url, 10.0, args.keep_alive) for _ in range(args.clients)]
        for client in clients:
            client.thread.start()
        time.sleep(5)
        drained_at = time.time()
        drain = drain_one(args.address, victim, args.drain_deadline) if victim else {"skipped": "no non-head replica"}
        timeline = []
        while time.time() - drained_at < args.drain_seconds:
            time.sleep(5)
            timeline.append({"t": time.time() - drained_at, **where_everything_runs()})
        for client in clients:
            client.stop.set()
            client.thread.join(10)
        results = [r for client in clients for r in client.results]
        failed = [r for r in results if not r["ok"]]
        drain_report = {
            "victim": victim,
            "drain": drain,
            "requests": len(results),
            "failed": len(failed),
            "failures": [{"t": r["t"] - drained_at, "error": r["error"]} for r in failed],
            "answered_by_after": sorted(
                {r["body"]["node_id"] for r in results if r["ok"] and r["t"] > drained_at + args.drain_seconds / 2}
            ),
            "timeline": timeline,
            "serve_status": str(serve.status()),
        }
        (args.out / "drain.json").write_text(json.dumps(drain_report, indent=2, default=str))
        print(json.dumps({k: drain_report[k] for k in ("victim", "drain", "requests", "failed")}, default=str))
    serve.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
