"""A Serve deployment and a steady client, for the continuity test
(tests/integration/test_serve_continuity.py) and benchmarks/bench_serve.py.

Two processes, each run as `python -m tests.serve_traffic ...` with this
checkout on PYTHONPATH:

- `deploy ADDRESS PORT OUT OPTIONS`: a driver that deploys 3 replicas of 2
  NeuronCores (`Where`: each answers with its partition) behind Serve's one
  proxy on the head raylet (`proxy_location="HeadOnly"`), writes
  OUT/serving once they run, answers each OUT/ask-N with OUT/answer-N.json
  (Serve's status and where its replicas run) until OUT/stop exists, then
  shuts Serve down. OPTIONS, a JSON object: "max_per_node" (Serve's
  `max_replicas_per_node`, or null) and "hold" (a partition held full by an
  actor while the replicas are placed, or null).
- `client PORT OUT RATE`: no Ray, only HTTP: RATE requests a second to
  127.0.0.1:PORT on a fixed schedule (a slow reply delays no later request),
  one connection each (urllib sends `Connection: close`), until OUT/stop
  exists; every request is a line of OUT/requests.jsonl, first `pending`,
  then its answer (status, partition or error, and `took`, seconds).

The client is a process of its own so it keeps sending while the cluster
under the driver is restarted (the driver then dies with its raylet). It
stands in for traffic from other machines, so as root (CI) it runs at a
higher priority (nice -10): on a two-core CI run beside the rest of the
suite, the rate it offers would otherwise fall with the host's load (one run
sent 2 requests in a second), not with what Serve does.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import math
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPLICAS = 3
CORES_PER_REPLICA = 2
APP = "where"


def spawn(what: str, args: list[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[str]:
    """`deploy` or `client` as a process of its own (in a session of its own:
    a terminal's Ctrl-C reaches only its caller, which stops it by PID),
    its output in `log`; `env` must put this checkout on PYTHONPATH."""
    with open(log, "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.serve_traffic", what, *args],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )


def plain(state: object) -> str:
    return str(getattr(state, "value", state))


def deploy(address: str, port: int, out: Path, options: dict[str, Any]) -> None:
    import ray
    from ray import serve
    from ray.util.state import list_actors

    ray.init(address=address, log_to_driver=False)
    per_node = {} if options.get("max_per_node") is None else {"max_replicas_per_node": options["max_per_node"]}

    @serve.deployment(
        num_replicas=REPLICAS,
        ray_actor_options={"resources": {"neuron_cores": CORES_PER_REPLICA}, "num_cpus": 0},
        **per_node,  # per Ray node, so per partition
    )
    class Where:
        def __call__(self, request: object) -> dict[str, Any]:
            return {"partition": ray.get_runtime_context().get_node_labels().get("ray-accel.io/partition")}

    hold = None
    if options.get("hold"):

        @ray.remote(resources={"neuron_cores": 8}, num_cpus=0)
        class Hold:
            def ready(self) -> bool:
                return True

        # That partition full while the replicas are placed (one per partition of the others).
        hold = Hold.options(label_selector={"ray-accel.io/partition": options["hold"]}).remote()
        ray.get(hold.ready.remote(), timeout=120)
    # One proxy, on the head raylet: it holds no device, so no drain ever takes it
    # (a partition's proxy keeps taking connections until Serve removes it: README).
    serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
    serve.run(Where.bind(), name=APP, route_prefix="/")
    if hold is not None:
        ray.kill(hold)

    def answer() -> dict[str, Any]:
        status = serve.status().applications[APP]
        (deployment,) = status.deployments.values()
        alive = list_actors(filters=[("class_name", "=", f"ServeReplica:{APP}:Where"), ("state", "=", "ALIVE")])
        return {
            "app": plain(status.status),
            "replica_states": {plain(k): v for k, v in deployment.replica_states.items()},
            "replica_nodes": sorted(a.node_id for a in alive),
            "proxies": {node: plain(s) for node, s in serve.status().proxies.items()},
        }

    (out / "serving").write_text(json.dumps(answer()))
    asked = 0
    while not (out / "stop").exists():
        if (out / f"ask-{asked}").exists():
            tmp = out / f"answer-{asked}.tmp"
            tmp.write_text(json.dumps(answer()))
            os.replace(tmp, out / f"answer-{asked}.json")
            asked += 1
        time.sleep(0.1)
    serve.shutdown()
    print(json.dumps({"shut_down": True}))


def client(port: int, out: Path, rate: float) -> None:
    if os.geteuid() == 0:
        os.nice(-10)
    url = f"http://127.0.0.1:{port}/"
    log = open(out / "requests.jsonl", "a", buffering=1)
    lock = threading.Lock()

    def one(sent: float) -> None:
        row: dict[str, Any] = {"t": sent}
        try:
            with urllib.request.urlopen(url, timeout=30) as reply:
                row["status"] = reply.status
                row["partition"] = json.loads(reply.read())["partition"]
        except urllib.error.HTTPError as e:
            row["status"], row["error"] = e.code, f"HTTPError: {e}"
        except Exception as e:
            row["status"], row["error"] = None, f"{type(e).__name__}: {e}"
        row["took"] = time.time() - sent
        with lock:
            log.write(json.dumps(row) + "\n")

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        due = time.time()
        while not (out / "stop").exists():
            sent = time.time()
            with lock:  # sent, not answered yet: a reader waits for its answer before it counts
                log.write(json.dumps({"t": sent, "pending": True}) + "\n")
            pool.submit(one, sent)
            due += 1 / rate
            time.sleep(max(0.0, due - time.time()))


def requests(out: Path) -> list[dict[str, Any]]:
    """Every request the client sent, by when: its answer, or `pending` while it has none."""
    path = out / "requests.jsonl"
    text = path.read_text() if path.exists() else ""
    rows: dict[float, dict[str, Any]] = {}
    for line in text.splitlines():
        if line.endswith("}"):  # the last line may be half written
            row = json.loads(line)
            if not row.get("pending") or row["t"] not in rows:
                rows[row["t"]] = row
    return sorted(rows.values(), key=lambda r: float(r["t"]))


def answered_before(out: Path, end: float) -> bool:
    """Whether every request sent before `end` has its answer (or failed, at
    the latest 30 s after it was sent)."""
    return not any(r.get("pending") for r in requests(out) if r["t"] < end)


def window(rows: list[dict[str, Any]], start: float, end: float) -> dict[str, Any]:
    """The requests sent in [start, end): how many, which failed, the fewest
    sent in any whole second, the partitions that answered, and the latency
    of those answered 200 (p50, p99: nearest rank; None without any)."""
    inside = [r for r in rows if start <= r["t"] < end]
    failed = [r for r in inside if r.get("status") != 200]
    per_second = collections.Counter(int(r["t"] - start) for r in inside)
    whole = range(int(end - start))
    took = sorted(float(r["took"]) for r in inside if r.get("status") == 200)
    return {
        "seconds": round(end - start, 1),
        "requests": len(inside),
        "failed": failed,
        "ok_per_s": (len(inside) - len(failed)) / (end - start) if end > start else 0.0,
        "p50_s": nearest_rank(took, 0.50),
        "p99_s": nearest_rank(took, 0.99),
        "fewest_per_s": min((per_second.get(s, 0) for s in whole), default=0),
        "partitions": dict(collections.Counter(r.get("partition") for r in inside)),
    }


def nearest_rank(ordered: list[float], q: float) -> float | None:
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else None


if __name__ == "__main__":
    what, args = sys.argv[1], sys.argv[2:]
    if what == "deploy":
        deploy(args[0], int(args[1]), Path(args[2]), json.loads(args[3]))
    elif what == "client":
        client(int(args[0]), Path(args[1]), float(args[2]))
    else:
        raise SystemExit(f"usage: python -m tests.serve_traffic deploy|client ...: not {what!r}")
