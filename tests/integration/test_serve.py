"""Ray Serve on a partitioned host: replicas placed on partitions.

The shared mock trn1.32xlarge split in four (`tests.clusters.TRN1_X4`, 8
NeuronCores per partition). One driver deploys two Serve applications, each
replica asking 4 NeuronCores and no CPU, at most one per Ray node
(`max_replicas_per_node=1`: a partition is a Ray node): "where", 4 replicas
on the partitions of the host's accelerator type (label selector
`ray-accel.io/accelerator-type`), so one per partition; then "pinned", 2
replicas on partitions chosen by name (`ray-accel.io/partition` in
`p1,p2`), on the cores the first left free. It sends HTTP requests to the
host's Serve port until every replica has answered, reads Serve's own status
(`serve.status()`) and shuts Serve down. Each reply says its replica, its
partition (its node's `ray-accel.io/partition` label) and its
`NEURON_RT_VISIBLE_CORES`.

The options are Ray's own (docs.ray.io/en/latest/serve/api/doc/
ray.serve.deployment_decorator.html: `ray_actor_options` with
`label_selector`, `max_replicas_per_node`); what they do on co-located
raylets is in docs/serving-findings.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ray_accel.cluster.host import free_port
from ray_accel.core.visibility import parse_visible_ids
from tests.clusters import Cluster, SharedClusters

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
ray.init(address=address, log_to_driver=False)

def where(name, count, selector):
    # Ray's own placement options: the accelerator, no CPU, one per Ray node
    # (a partition), and a label selector naming the partitions to use.
    @serve.deployment(
        name=name,
        num_replicas=count,
        max_replicas_per_node=1,
        ray_actor_options={"resources": {"neuron_cores": cores}, "num_cpus": 0, "label_selector": selector},
    )
    class Where:
        def __call__(self, request):
            labels = ray.get_runtime_context().get_node_labels()
            return {
                "replica": serve.get_replica_context().replica_id.unique_id,
                "partition": labels.get("ray-accel.io/partition"),
                "node_id": ray.get_runtime_context().get_node_id(),
                "visible": os.environ.get("NEURON_RT_VISIBLE_CORES"),
                "pid": os.getpid(),
            }
    return Where.bind()

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
    # Two chosen partitions by name, on the cores the first app left free.
    serve.run(where("Pinned", 2, {"ray-accel.io/partition": "in(p1,p2)"}), name="pinned", route_prefix="/pinned")
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
finally:
    serve.shutdown()
out["shut_down"] = True
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def served(shared_clusters: SharedClusters, trn1x4_cluster: Cluster) -> Iterator[tuple[Cluster, dict[str, Any]]]:
    """The driver's result on the shared four-partition cluster. A driver
    that did not shut Serve down (it failed or ran out of time) may leave
    Serve's detached controller behind, so the shared cluster is stopped
    then: the next module sharing it gets a clean one."""
    clean = False
    try:
        result = trn1x4_cluster.driver(
            SERVE_ONE_PER_PARTITION, str(free_port()), str(REPLICAS), str(CORES), str(MAX_REQUESTS), timeout=300
        )
        clean = bool(result.get("shut_down"))
        yield trn1x4_cluster, result
    finally:
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
