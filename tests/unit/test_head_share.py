"""The head raylet's share comes out of the host's division: on a head host
the head's own raylet (`HEAD_SHARE`) and the partitions together claim the
host's figures once, never more (what Ray's totals for the host then show is
checked through `ray.nodes()` in tests/integration/test_head_share.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_accel.cluster.host import (
    HEAD_SHARE,
    OBJECT_STORE_MINIMUM,
    HostResources,
    ShareError,
    divide,
    free_port,
    partitions_host,
)
from ray_accel.cluster.raylet import Join, RayOptions, Split, StartRequest
from ray_accel.cluster.start import plan_launch
from ray_accel.core.numa import NumaTopology
from ray_accel.core.validate import HEAD
from tests.badinput import badinput
from tests.clirun import run_cli_here

ONE_NODE = NumaTopology("/none", {0: frozenset({0, 1})})
FIGURES = {"cpus": 8, "memory": 4_000_000_000, "object_store_memory": 1_000_000_000}


@given(
    st.integers(0, 512),
    st.integers(1, 10**13),
    st.integers(OBJECT_STORE_MINIMUM, 10**12),
    st.lists(st.integers(1, 64), min_size=1, max_size=16),
)
def test_the_head_and_the_partitions_claim_the_host_once(cpus: int, memory: int, store: int, units: list[int]) -> None:
    host = HostResources(cpus, memory, store, {"license": 3})
    left = partitions_host(host, HEAD_SHARE)
    names = [f"p{i}" for i in range(len(units))]
    shares = divide(names, units, [() for _ in units], left, ONE_NODE, {0, 1}).shares
    raylets = [HEAD_SHARE, *shares]
    assert sum(s.cpus for s in raylets) == host.cpus
    assert sum(s.memory for s in raylets) == host.memory
    assert sum(s.object_store_memory for s in raylets) == host.object_store_memory
    assert sum(s.resources.get("license", 0) for s in raylets) == 3, "custom resources are the partitions' alone"
    assert left.sources == host.sources


def test_a_host_without_a_head_divides_its_figures_whole() -> None:
    host = HostResources(**FIGURES)
    assert partitions_host(host, None) == host


@badinput("unnamed")
def test_an_object_store_smaller_than_the_heads_is_refused_naming_both() -> None:
    host = HostResources(2, 10**9, OBJECT_STORE_MINIMUM - 1)
    with pytest.raises(ShareError, match=f"object store of {OBJECT_STORE_MINIMUM - 1} bytes") as caught:
        partitions_host(host, HEAD_SHARE)
    assert str(OBJECT_STORE_MINIMUM) in str(caught.value) and "--object-store-memory" in str(caught.value)


@pytest.mark.parametrize("preset", ["trn1.32xlarge", "p4d.24xlarge"])
@pytest.mark.parametrize("head", [True, False])
def test_a_launch_plan_gives_the_host_once_the_head_included(
    preset: str, head: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`start`'s plan with the user's figures after `--`: its raylets' shares
    (a head's first) add up to those figures exactly."""
    monkeypatch.setenv("RAYACCEL_MOCK", preset)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    given_figures = ["--num-cpus", "8", "--memory", "4000000000", "--object-store-memory", "1000000000"]
    join = Join(head=True, port=free_port()) if head else Join(address="127.0.0.1:6379")
    req = StartRequest(join=join, split=Split(partitions=2), ray=RayOptions.read(given_figures))
    lp = plan_launch(req, "127.0.0.1", tmp_path / "state")
    shares = [raylet.share for raylet in lp.raylets]
    assert [s.partition for s in shares] == [*([HEAD] if head else []), "p0", "p1"]
    assert sum(s.cpus for s in shares) == FIGURES["cpus"]
    assert sum(s.memory for s in shares) == FIGURES["memory"]
    assert sum(s.object_store_memory for s in shares) == FIGURES["object_store_memory"]
    if head:
        assert shares[0] == HEAD_SHARE
    assert not (tmp_path / "state").exists(), "a plan writes nothing"


def test_plan_json_shows_the_heads_share_and_the_partitions_divide_the_rest() -> None:
    out = run_cli_here("plan", "--partitions", "2", "--json", env={"RAYACCEL_MOCK": "trn1.32xlarge"})
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["head"]["object_store_memory"] == OBJECT_STORE_MINIMUM and plan["head"]["cpus"] == 0
    for key in ("cpus", "memory", "object_store_memory"):
        claimed = plan["head"][key] + sum(p[key] for p in plan["partitions"])
        assert claimed == plan["host"][key], key
