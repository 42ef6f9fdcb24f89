"""A head host's raylets, the head's own included, claim no more than the
figures ray-accel divides, seen through `ray.nodes()`: the user's
`--num-cpus`/`--memory`/`--object-store-memory` given after `--`, or the
machine's (Ray's own detection: its CPU count, and an object store that is
Ray's rule applied to the memory divided). The head raylet's share comes out
of the host's figures before the partitions divide the rest
(`ray_accel.cluster.host.partitions_host`; the division itself is tested in
tests/unit/test_head_share.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ray_accel.cluster.host import HEAD_SHARE
from ray_accel.core.validate import HEAD
from ray_accel.rayapi import node as rayapi_node
from tests.clusters import ClusterSpec, start_cluster

pytestmark = pytest.mark.ray

# What every alive node of the cluster claims, with its ray-accel labels.
NODES_VIEW = r"""
import json, sys
import ray
ray.init(address=sys.argv[1], log_to_driver=False)
print(json.dumps([{"id": n["NodeID"], "labels": n["Labels"], "resources": n["Resources"]}
                  for n in ray.nodes() if n["Alive"]]))
"""
HOST_LABEL = "ray-accel.io/host"
PARTITION_LABEL = "ray-accel.io/partition"
KEYS = ("CPU", "memory", "object_store_memory")
USER = {"CPU": 6, "memory": 3_000_000_000, "object_store_memory": 500_000_000}
USER_ARGS = ("--num-cpus", "6", "--memory", "3000000000", "--object-store-memory", "500000000")


def host_claims(nodes: list[dict[str, Any]]) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """The host's alive nodes (one host: one host label), what they claim in
    all, and each by partition (the head's under HEAD)."""
    hosts = {n["labels"].get(HOST_LABEL) for n in nodes}
    assert len(hosts) == 1 and None not in hosts, f"one host, every node labelled: {hosts}"
    by_name = {n["labels"].get(PARTITION_LABEL, HEAD): n for n in nodes}
    assert set(by_name) == {HEAD, "p0", "p1"}, "the head raylet and two partitions"
    total = {k: sum(n["resources"].get(k, 0) for n in nodes) for k in KEYS}
    return total, by_name


@pytest.mark.parametrize("figures", ["user", "machine"])
@pytest.mark.parametrize("preset", ["trn1.32xlarge", "p4d.24xlarge"])
def test_the_hosts_raylets_claim_no_more_than_the_figures_divided(preset: str, figures: str, tmp_path: Path) -> None:
    spec = ClusterSpec(
        f"{preset}-{figures}",
        preset,
        2,
        start_args=("--no-metrics",),
        ray_args=USER_ARGS if figures == "user" else (),
    )
    cluster = start_cluster(tmp_path, spec)
    try:
        total, by_name = host_claims(cluster.driver(NODES_VIEW))
    finally:
        stopped = cluster.stop()
    assert stopped.returncode == 0, stopped.stderr[-2000:]

    head = by_name[HEAD]["resources"]
    assert not head.get("CPU") and not head.get("memory"), "the head raylet: no CPUs, no memory"
    assert head["object_store_memory"] == HEAD_SHARE.object_store_memory
    if figures == "user":
        for key in KEYS:
            assert total[key] <= USER[key], (key, total[key], USER[key])
            # The division is whole: the host's raylets claim the figures exactly.
            assert total[key] == USER[key], (key, total[key], USER[key])
        return
    # The machine's figures: Ray's CPU count, and `memory` + object store
    # being the memory Ray found available, the object store Ray's own share of it.
    assert total["CPU"] == rayapi_node.host_sizing().cpus
    divided = int(total["memory"] + total["object_store_memory"])
    assert total["object_store_memory"] == rayapi_node.object_store_for(divided), (
        f"the host's raylets claim an object store of {total['object_store_memory']}, more than Ray's "
        f"{rayapi_node.object_store_for(divided)} for the {divided} bytes divided"
    )
