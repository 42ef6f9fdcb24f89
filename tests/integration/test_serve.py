"""Ray Serve on a partitioned host: replicas placed on partitions.

The shared mock trn1.32xlarge split in four (`tests.clusters.TRN1_X4`, 8
NeuronCores per partition). One driver deploys two Serve applications, each
replica asking 4 NeuronCores and no CPU, at most one per Ray node
(`max_replicas_per_node=1`: a partition is a Ray node): "where", 4 replicas
on the partitions of the host's accelerator type (label selector
`ray-accel.io/accelerator-type`), so one per partition; then "pinned", 2
replicas on partitions chosen by name (`ray-accel.io/partition` in
`p1,p2`), on the cores the first left free, its class under ray-accel's
`@with_hooks` (examples/hooks.py's recording hook, whose calls go to a
file the test reads after Serve shut down). It sends HTTP requests to the
host's Serve port until every replica has answered, reads Serve's own status
(`serve.status()`) and its replicas' actors in Ray's State API
(`ray.util.state.list_actors`), then waits while the test reads `ray-accel
top --once --json` and `status --json` (each partition's `workloads`, its
replicas named: app, deployment, replica id, PID) and Ray's Prometheus
endpoints, and shuts Serve down. Each reply says its replica, its partition
(its node's `ray-accel.io/partition` label), its node, its PID, its
`NEURON_RT_VISIBLE_CORES`, Serve's ranks for it and the hook's variable.

The options are Ray's own (docs.ray.io/en/latest/serve/api/doc/
ray.serve.deployment_decorator.html: `ray_actor_options` with
`label_selector`, `max_replicas_per_node`); what they do on co-located
raylets is in docs/serving-findings.md.
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ray_accel.cluster.host import free_port
from ray_accel.core.visibility import parse_visible_ids
from tests.clusters import Cluster, SharedClusters
from tests.integration.health_steps import until
from tests.integration.scrapes import scrape_all, top

pytestmark = pytest.mark.ray

REPLICAS = 4
CORES = 4
# Requests sent at most: the kernel spreads new connections over the proxies
# (SO_REUSEPORT) and each proxy's router over the replicas, so the first few
# may all reach one replica; 200 leave no doubt that every replica is reached.
MAX_REQUESTS = 200

SERVE_ONE_PER_PARTITION = r"""
import json, os, sys, time, urllib.request
import ray
from ray import serve

address, port, replicas, cores, max_requests = sys.argv[1], int(sys.argv[2]), *map(int, sys.argv[3:6])
hooks_log = sys.argv[6]
ray.init(address=address, log_to_driver=False)

def where(name, count, selector, hooked=False):
    class Where:
        def __call__(self, request):
            labels = ray.get_runtime_context().get_node_labels()
            context = serve.get_replica_context()
            return {
                "hook_token": os.environ.get("EXAMPLE_HOOK_TOKEN"),
                "replica": context.replica_id.unique_id,
                "rank": {k: getattr(context.rank, k) for k in ("rank", "node_rank", "local_rank")},
                "partition": labels.get("ray-accel.io/partition"),
                "node_id": ray.get_runtime_context().get_node_id(),
                "visible": os.environ.get("NEURON_RT_VISIBLE_CORES"),
                "pid": os.getpid(),
            }
    if hooked:
        # ray-accel's lifecycle hooks, as on a plain actor: examples/hooks.py
        # records each call and gives the workload EXAMPLE_HOOK_TOKEN.
        from examples.hooks import Recording
        from ray_accel import with_hooks
        Where = with_hooks(Recording(hooks_log), run_id="serve-pinned")(Where)
    # Ray's own placement options: the accelerator, no CPU, one per Ray node
    # (a partition), and a label selector naming the partitions to use.
    deployment = serve.deployment(
        name=name,
        num_replicas=count,
        max_replicas_per_node=1,
        ray_actor_options={"resources": {"neuron_cores": cores}, "num_cpus": 0, "label_selector": selector},
    )
    return deployment(Where).bind()

def plain(state):
    # Serve's status enums are str enums, some already plain strings in 2.60.
    return str(getattr(state, "value", state))

def ask_until_all(url, count, out):
    replies, seen = [], set()
    for _ in range(max_requests):
        try:
            with urllib.request.urlopen(url, timeout=30) as reply:
                body = json.loads(reply.read())
        except Exception as e:
            out["failed"].append(f"{url}: {type(e).__name__}: {e}")
            continue
        replies.append(body)
        seen.add(body["replica"])
        if len(seen) == count:
            break
    return replies

out = {"failed": []}
try:
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    started = time.monotonic()
    # Every partition of the host's accelerator type, one replica each.
    serve.run(where("Where", replicas, {"ray-accel.io/accelerator-type": "Trainium"}), name="where", route_prefix="/")
    out["deployed_s"] = time.monotonic() - started
    # Two chosen partitions by name, on the cores the first app left free,
    # with ray-accel's lifecycle hooks.
    pinned = where("Pinned", 2, {"ray-accel.io/partition": "in(p1,p2)"}, hooked=True)
    serve.run(pinned, name="pinned", route_prefix="/pinned")
    out["replies"] = ask_until_all(f"http://127.0.0.1:{port}/", replicas, out)
    out["pinned"] = ask_until_all(f"http://127.0.0.1:{port}/pinned", 2, out)
    status = serve.status()
    out["status"] = {
        app_name: {
            "app": plain(app.status),
            "deployments": {
                name: {
                    "status": plain(d.status),
                    "replica_states": {plain(k): v for k, v in d.replica_states.items()},
                }
                for name, d in app.deployments.items()
            },
        }
        for app_name, app in status.applications.items()
    }
    out["proxies"] = {node: plain(s) for node, s in status.proxies.items()}
    # Serve's fallback proxy port (RAY_SERVE_FALLBACK_PROXY_HTTP_PORT, 8500):
    # every raylet of the host would race for it if each started one.
    import socket
    with socket.socket() as probe:
        out["fallback_listening"] = probe.connect_ex(("127.0.0.1", 8500)) == 0
    # Serve's replicas as Ray's State API lists their actors.
    from ray.util.state import list_actors
    actors = list_actors(filters=[("state", "=", "ALIVE")], limit=10000, raise_on_missing_output=False)
    out["actors"] = [
        {"name": a.name, "pid": a.pid, "node_id": a.node_id, "class_name": a.class_name}
        for a in actors
        if (a.name or "").startswith("SERVE_REPLICA::")
    ]
    # The replicas stay up while the test reads ray-accel's view of them.
    print(json.dumps(out), flush=True)
    sys.stdin.readline()
finally:
    serve.shutdown()
print(json.dumps({"shut_down": True}), flush=True)
"""


def json_lines(proc: subprocess.Popen[str]) -> queue.Queue[dict[str, Any] | None]:
    """The driver's JSON lines as it prints them (None once its stdout ends)."""
    lines: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    lines.put(json.loads(line))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def next_json(lines: queue.Queue[dict[str, Any] | None], timeout: float, log: Path) -> dict[str, Any]:
    try:
        got = lines.get(timeout=timeout)
    except queue.Empty:
        got = None
    assert got is not None, f"the driver printed no result: {log.read_text()[-3000:]}"
    return got


def replica_pids(result: dict[str, Any]) -> set[int]:
    return {int(r["pid"]) for r in (*result["replies"], *result["pinned"])}


def top_naming(cluster: Cluster, result: dict[str, Any], timeout: float = 90.0) -> dict[str, Any]:
    """`top --once --json` once it names every replica that answered (its
    exporter samples every 5 s), or its last view after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        view = top(cluster)
        named = {w["pid"] for p in view["partitions"] for w in p["workloads"] if w.get("replica_id")}
        if replica_pids(result) <= named or time.monotonic() > deadline:
            return view
        time.sleep(2)


def replica_series(cluster: Cluster, result: dict[str, Any], timeout: float = 60.0) -> list[tuple[str, dict[str, str]]]:
    """(name, tags) of the workload series whose workload is a replica that
    answered, once each has its RSS series (Ray reports every 10 s), or after `timeout`."""
    wanted = {f"[{pid}]" for pid in replica_pids(result)}
    deadline = time.monotonic() + timeout
    while True:
        found = [
            (name, tags)
            for name, tags, _ in scrape_all(cluster)
            if name.startswith("ray_accel_workload_") and tags["workload"].endswith(tuple(wanted))
        ]
        rss = {t["workload"][t["workload"].rindex("[") :] for n, t in found if n == "ray_accel_workload_rss_bytes"}
        if rss >= wanted or time.monotonic() > deadline:
            return found
        time.sleep(2)


@pytest.fixture(scope="module")
def served(
    shared_clusters: SharedClusters, trn1x4_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Cluster, dict[str, Any]]]:
    """The driver's result on the shared four-partition cluster, with
    ray-accel's views read while its replicas ran (`top`: `top --once
    --json`; `ray_accel_status`: `status --json`; `series`: the replicas' workload
    series; `top_text`, `status_text`: their tables). A driver that did not shut Serve down (it failed or ran out of
    time) may leave Serve's detached controller behind, so the shared
    cluster is stopped then: the next module sharing it gets a clean one."""
    cluster, clean = trn1x4_cluster, False
    log = tmp_path_factory.mktemp("serve") / "driver.err"
    hooks_log = log.parent / "hooks.log"
    args = [str(free_port()), str(REPLICAS), str(CORES), str(MAX_REQUESTS), str(hooks_log)]
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVE_ONE_PER_PARTITION, cluster.address, *args],
            env=cluster.driver_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        lines = json_lines(proc)
        result = next_json(lines, 300, log)
        result["top"] = top_naming(cluster, result)
        status = cluster.cli("status", "--json")
        assert status.returncode == 0, status.stderr[-2000:]
        result["ray_accel_status"] = json.loads(status.stdout)
        result["series"] = replica_series(cluster, result)
        # The tables as a user sees them (kept beside the driver's log).
        for command in ("top", "status"):
            shown = cluster.cli(command, *(["--once"] if command == "top" else []))
            assert shown.returncode == 0, shown.stderr[-2000:]
            result[f"{command}_text"] = shown.stdout
            (log.parent / f"{command}.txt").write_text(shown.stdout)
        assert proc.stdin is not None
        proc.stdin.write("done\n")
        proc.stdin.flush()
        clean = bool(next_json(lines, 120, log).get("shut_down"))
        proc.wait(timeout=60)
        result["hooks_log"] = hooks_log
        yield cluster, result
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if not clean:
            shared_clusters.release()


def test_every_replica_answers_over_http(served: tuple[Cluster, dict[str, Any]]) -> None:
    _, result = served
    assert result["failed"] == [], result["failed"]
    assert len({r["replica"] for r in result["replies"]}) == REPLICAS, result["replies"]
    assert len({r["replica"] for r in result["pinned"]}) == 2, result["pinned"]


def cores_of(cluster: Cluster, replies: list[dict[str, Any]]) -> dict[str, tuple[str, set[int]]]:
    """Replica -> (its partition, its visible cores), each checked to be `CORES` cores inside its partition's."""
    found = {}
    for reply in replies:
        visible = parse_visible_ids(reply["visible"])
        assert visible is not None and len(visible) == CORES, reply
        assert set(visible) <= set(cluster.part(reply["partition"])["core_ids"]), reply
        found[reply["replica"]] = (reply["partition"], set(visible))
    return found


def test_one_replica_per_partition_with_disjoint_cores_inside_it(served: tuple[Cluster, dict[str, Any]]) -> None:
    cluster, result = served
    found = cores_of(cluster, result["replies"])
    partitions = sorted(partition for partition, _ in found.values())
    assert partitions == sorted(p["partition"] for p in cluster.status["partitions"]), found
    seen: set[int] = set()
    for partition, visible in found.values():
        assert not seen & visible, (partition, sorted(visible), sorted(seen))
        seen |= visible
    assert len(seen) == REPLICAS * CORES


def test_replicas_pinned_by_partition_name_stay_on_those_partitions(served: tuple[Cluster, dict[str, Any]]) -> None:
    cluster, result = served
    pinned = cores_of(cluster, result["pinned"])
    assert sorted(partition for partition, _ in pinned.values()) == ["p1", "p2"], pinned
    first = set().union(*(visible for _, visible in cores_of(cluster, result["replies"]).values()))
    for partition, visible in pinned.values():
        assert not first & visible, (partition, sorted(visible), sorted(first))


def test_serve_status_says_running_with_every_replica(served: tuple[Cluster, dict[str, Any]]) -> None:
    _, result = served
    assert result["status"] == {
        "where": {
            "app": "RUNNING",
            "deployments": {"Where": {"status": "HEALTHY", "replica_states": {"RUNNING": REPLICAS}}},
        },
        "pinned": {
            "app": "RUNNING",
            "deployments": {"Pinned": {"status": "HEALTHY", "replica_states": {"RUNNING": 2}}},
        },
    }, result["status"]
    # A proxy on the head (the controller's node) and one on each partition with a replica.
    proxies = result["proxies"]
    assert len(proxies) == 1 + REPLICAS and set(proxies.values()) == {"HEALTHY"}, proxies


APPS = {"where": "Where", "pinned": "Pinned"}  # app -> its deployment


def replicas_named(result: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Each replica that answered, by PID: what its reply says of itself."""
    out = {}
    for app, key in (("where", "replies"), ("pinned", "pinned")):
        for r in result[key]:
            out[int(r["pid"])] = {**r, "app": app, "deployment": APPS[app]}
    return out


def test_top_lists_each_replica_under_its_partition(served: tuple[Cluster, dict[str, Any]]) -> None:
    """`top --json`: each replica under its own partition's `workloads`, with
    its app, deployment, replica id (as Serve's replica context gives it)
    and PID, nothing unknown; the same entries in the top-level list."""
    _, result = served
    view, replies = result["top"], replicas_named(result)
    fields = ("kind", "app", "deployment", "replica_id", "pid", "partition", "unknown")
    listed = {
        w["pid"]: ({k: w[k] for k in fields}, p["node_id"])
        for p in view["partitions"]
        for w in p["workloads"]
        if w["kind"] == "serve_replica"
    }
    assert listed == {
        pid: (
            {
                "kind": "serve_replica",
                "app": r["app"],
                "deployment": r["deployment"],
                "replica_id": r["replica"],
                "pid": pid,
                "partition": r["partition"],
                "unknown": {},
            },
            r["node_id"],
        )
        for pid, r in replies.items()
    }, (view["errors"], [p["workloads"] for p in view["partitions"]])
    # Every partition's workloads are its own, and all are in the top-level list as well.
    assert all(w["partition"] == p["partition"] for p in view["partitions"] for w in p["workloads"])
    assert [w for p in view["partitions"] for w in p["workloads"]] == view["workloads"]


def test_the_replicas_top_names_are_serves_own(served: tuple[Cluster, dict[str, Any]]) -> None:
    """What `top` says of each replica (app, deployment, id, PID, raylet) is
    what Ray's State API says of its actor (`SERVE_REPLICA::<app>#<deployment>#<id>`),
    and as many as `serve.status()` counts running."""
    _, result = served
    in_top = {
        (w["app"], w["deployment"], w["replica_id"], w["pid"], p["node_id"])
        for p in result["top"]["partitions"]
        for w in p["workloads"]
        if w["kind"] == "serve_replica"
    }
    in_state_api = {
        (*a["name"].removeprefix("SERVE_REPLICA::").split("#"), a["pid"], a["node_id"]) for a in result["actors"]
    }
    assert in_top == in_state_api, (in_top, result["actors"])
    running = {app: s["deployments"][APPS[app]]["replica_states"]["RUNNING"] for app, s in result["status"].items()}
    assert running == {app: sum(t[0] == app for t in in_top) for app in APPS}


def test_status_names_each_partitions_replicas(served: tuple[Cluster, dict[str, Any]]) -> None:
    """`status --json`: each partition's `workloads` name its replicas as `top` does."""
    _, result = served
    fields = ("app", "deployment", "replica_id", "pid")
    in_status = {
        (p["partition"], *(w[k] for k in fields))
        for p in result["ray_accel_status"]["partitions"]
        for w in p["workloads"]
        if w["kind"] == "serve_replica"
    }
    replies = replicas_named(result)
    assert in_status == {(r["partition"], r["app"], r["deployment"], r["replica"], pid) for pid, r in replies.items()}


def test_replica_processes_are_attributed_to_their_partition_in_the_metrics(
    served: tuple[Cluster, dict[str, Any]],
) -> None:
    """Each replica's process tree has its workload series (RSS, CPU time),
    tagged with the partition it runs on, as a training worker's."""
    _, result = served
    partition_of = {f"[{pid}]": r["partition"] for pid, r in replicas_named(result).items()}
    seen: dict[str, set[str]] = {}
    for name, tags in result["series"]:
        pid = tags["workload"][tags["workload"].rindex("[") :]
        assert tags["partition"] == partition_of[pid], (name, tags)
        seen.setdefault(name, set()).add(pid)
    for name in ("ray_accel_workload_rss_bytes", "ray_accel_workload_cpu_seconds"):
        assert seen.get(name) == set(partition_of), (name, sorted(seen.get(name, ())), sorted(partition_of))


def test_tops_and_statuss_tables_name_each_replica_on_its_partitions_row(
    served: tuple[Cluster, dict[str, Any]],
) -> None:
    """Each replica's row in `top`'s workloads table and `status`'s: its
    partition, its title and PID, `<app>/<deployment> <replica id>`."""
    _, result = served
    for command in ("top", "status"):
        lines = result[f"{command}_text"].splitlines()
        for pid, r in replicas_named(result).items():
            named = f"{r['app']}/{r['deployment']} {r['replica']}"
            rows = [line.split() for line in lines if f"[{pid}]" in line and named in line]
            assert len(rows) == 1 and r["partition"] in rows[0], (command, pid, named, result[f"{command}_text"])


def test_replica_ranks_count_each_partition_as_a_node(served: tuple[Cluster, dict[str, Any]]) -> None:
    """Serve ranks a deployment's replicas per Ray node (`ReplicaRank`:
    `node_rank`, `local_rank`; `serve/_private/deployment_state.py` keys them
    on node id), and a partition is a Ray node: one replica per partition has
    local rank 0 and a node rank of its own, as ray-accel ranks Train's
    workers per raylet. Ray already does this on co-located raylets; nothing
    is changed."""
    _, result = served
    for replies, count in ((result["replies"], REPLICAS), (result["pinned"], 2)):
        rank_of = {r["replica"]: (r["partition"], r["rank"]) for r in replies}
        assert len(rank_of) == count, rank_of
        partitions = [partition for partition, _ in rank_of.values()]
        ranks = [rank for _, rank in rank_of.values()]
        assert len(set(partitions)) == count, rank_of
        assert sorted(r["rank"] for r in ranks) == list(range(count)), rank_of
        assert sorted(r["node_rank"] for r in ranks) == list(range(count)), rank_of
        assert [r["local_rank"] for r in ranks] == [0] * count, rank_of


def test_no_fallback_proxy_contends_for_its_port(served: tuple[Cluster, dict[str, Any]]) -> None:
    """Serve starts its head's fallback proxy (port 8500) only beside native
    proxies (`serve/_private/proxy_state.py`, `_start_fallback_proxy_if_needed`);
    with Serve's default proxies on five raylets of one host, nothing listens
    there, so no two raylets race for it."""
    _, result = served
    assert len(result["proxies"]) == 1 + REPLICAS, result["proxies"]
    assert result["fallback_listening"] is False


def test_lifecycle_hooks_run_around_each_replica_as_around_an_actor(served: tuple[Cluster, dict[str, Any]]) -> None:
    """`@with_hooks` under `@serve.deployment` ("pinned"): each replica runs
    pre_create and post_create as it starts, with the hook's environment
    variable in its requests, and pre_terminate and post_terminate once each
    when Serve shuts it down (Serve calls the class's `__del__` first).
    The other application's replicas are not hooked and see no variable."""
    _, result = served
    assert {r["hook_token"] for r in result["pinned"]} == {"granted"}, result["pinned"]
    assert {r["hook_token"] for r in result["replies"]} == {None}, result["replies"]
    log: Path = result["hooks_log"]
    ended = ["post_terminate"] * 2

    def events() -> list[dict[str, Any]]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    until(lambda: [e["event"] for e in events() if e["event"] == "post_terminate"] == ended, 60)
    by_workload: dict[str, list[dict[str, Any]]] = {}
    for event in events():
        by_workload.setdefault(event["workload"], []).append(event)
    assert len(by_workload) == 2, by_workload
    order = ["pre_create", "post_create", "pre_terminate", "post_terminate"]
    for workload, seen in by_workload.items():
        assert workload.startswith("actor-") and [e["event"] for e in seen] == order, seen
    assert {e["pid"] for seen in by_workload.values() for e in seen} == {r["pid"] for r in result["pinned"]}
