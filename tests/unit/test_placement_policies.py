"""Placement policies: properties every policy keeps on random clusters, and
the choices that tell the policies apart."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_accel.placement.live import view_from_nodes
from ray_accel.placement.model import (
    Assignment,
    FreePartition,
    Job,
    PlacementError,
    Slot,
    apply,
    capacity,
    eligible,
    largest_fit,
    mark_held,
)
from ray_accel.placement.policies import POLICIES, Pack, Spread, Topology, get_policy
from tests.badinput import badinput

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "ray" / "nodes-trn1.32xlarge-4.json"
KINDS = [("neuron", "neuron_cores"), ("gpu", "GPU")]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[FreePartition, ...]:
    parts = []
    for h in range(draw(st.integers(1, 3))):
        family, resource = draw(st.sampled_from(KINDS))
        count = draw(st.integers(1, 4))
        size = draw(st.sampled_from([1, 2, 4, 8]))
        per_dev = 2 if family == "neuron" and size > 1 else 1
        devs_per_part = size // per_dev
        for i in range(count):
            devices = tuple(range(i * devs_per_part, (i + 1) * devs_per_part))
            # A ring of partitions on the host: i links to i-1 and i+1.
            neighbours = {(i - 1) % count, (i + 1) % count} - {i}
            links = frozenset(d for j in neighbours for d in range(j * devs_per_part, (j + 1) * devs_per_part))
            free = draw(st.integers(0, size))
            known = draw(st.booleans())
            parts.append(
                FreePartition(
                    host=f"h{h}",
                    name=f"p{i}",
                    node_id=f"n{h}{i}",
                    family=family,
                    resource=resource,
                    total=size,
                    free=free,
                    core_ids=tuple(range(i * size, (i + 1) * size)) if known else (),
                    device_ids=devices if known else (),
                    links=links if known else frozenset(),
                    connected=draw(st.sampled_from([True, None])) if known else None,
                    cpus_free=draw(st.sampled_from([math.inf, 0.0, 1.0, 2.0, 4.0])),
                )
            )
    return tuple(parts)


@st.composite
def jobs(draw: st.DrawFn, n: int | None = None) -> list[Job]:
    out = []
    for j in range(n if n is not None else draw(st.integers(1, 5))):
        family, resource = draw(st.sampled_from(KINDS))
        out.append(
            Job(
                id=f"j{j}",
                name=f"job{j}",
                workers=draw(st.integers(1, 8)),
                devices_per_worker=draw(st.sampled_from([1, 2, 4, 8])),
                family=family,
                resource=resource,
                cpus_per_worker=draw(st.sampled_from([0.0, 0.0, 0.5, 1.0])),
            )
        )
    return out


def check_fits(a: Assignment, parts: tuple[FreePartition, ...]) -> None:
    """Every worker on a partition of the job's family, none over-committed."""
    by_key = {p.key: p for p in parts}
    assert len(a.workers) == a.job.workers
    for key, n in Counter(s.key for s in a.workers).items():
        p = by_key[key]
        assert eligible(a.job, p), f"{a.job.family} worker on a {p.family} partition"
        assert n * a.job.devices_per_worker <= p.free, "over-committed units"
        if a.job.cpus_per_worker:
            assert n * a.job.cpus_per_worker <= p.cpus_free + 1e-9, "over-committed CPUs"
        assert all(s.node_id == p.node_id for s in a.workers if s.key == key)


@pytest.mark.parametrize("name", list(POLICIES))
@given(parts=clusters(), job=jobs(1))
def test_allocate_covers_every_worker_or_names_the_largest_job_that_fits(
    name: str, parts: tuple[FreePartition, ...], job: list[Job]
) -> None:
    policy = get_policy(name)
    (j,) = job
    fit = largest_fit(j, parts)
    try:
        a = policy.allocate(j, parts)
    except PlacementError as e:
        assert fit < j.workers, "refused a job that fits"
        assert e.largest_workers == fit
        assert f"fits is {fit} worker(s)" in str(e) or "no live partition offers" in str(e)
        assert repr(j.name) in str(e)
        if fit:
            smaller = Job(
                id=j.id,
                name=j.name,
                workers=fit,
                devices_per_worker=j.devices_per_worker,
                family=j.family,
                resource=j.resource,
                cpus_per_worker=j.cpus_per_worker,
            )
            check_fits(policy.allocate(smaller, parts), parts)  # the size it names does fit
        return
    assert fit >= j.workers
    check_fits(a, parts)
    after = apply(parts, a)
    assert all(p.free >= 0 and p.cpus_free >= -1e-9 for p in after)


def running_state(
    policy_name: str, parts: tuple[FreePartition, ...], running: list[Job]
) -> tuple[tuple[FreePartition, ...], dict[str, Assignment]]:
    """Place `running` one by one; the live view then counts them as used and
    knows nothing of their grant sizes (as Ray reports it)."""
    policy = get_policy(policy_name)
    previous: dict[str, Assignment] = {}
    live = parts
    for j in running:
        try:
            a = policy.allocate(j, live)
        except PlacementError:
            continue
        live = apply(live, a)
        previous[j.id] = a
    return tuple(replace(p, held=()) for p in live), previous


@pytest.mark.parametrize("name", list(POLICIES))
@settings(max_examples=60)
@given(parts=clusters(), old=jobs(), new=jobs())
def test_optimize_keeps_running_jobs_and_never_over_commits(
    name: str, parts: tuple[FreePartition, ...], old: list[Job], new: list[Job]
) -> None:
    new = [replace(j, id=f"new{i}") for i, j in enumerate(new)]
    live, previous = running_state(name, parts, old)
    policy = get_policy(name)
    everyone = [previous[k].job for k in previous] + new
    result = policy.optimize(everyone, live, previous)
    for k, a in previous.items():
        assert result.assignments[k] == a, "a running job was moved without being asked"
    waiting = {k for k, _ in result.waiting}
    assert waiting | set(result.assignments) == {j.id for j in everyone}
    assert not waiting & set(result.assignments)
    for _, reason in result.waiting:
        assert "largest job" in reason or "no live partition offers" in reason
    state = live
    for j in new:
        if j.id in result.assignments:
            check_fits(result.assignments[j.id], state)
            state = apply(state, result.assignments[j.id])
    moved = policy.optimize(everyone, live, previous, move=True)
    state = live
    for a in previous.values():
        state = apply(state, a, -1)
    for j in everyone:
        if j.id in moved.assignments:
            check_fits(moved.assignments[j.id], state)
            state = apply(state, moved.assignments[j.id])
    assert {k for k, _ in moved.waiting} | set(moved.assignments) == {j.id for j in everyone}


def fixture_view() -> tuple[FreePartition, ...]:
    data = json.loads(FIXTURE.read_text())
    return view_from_nodes(data["nodes"], data["available"]).partitions


def job(workers: int, per: int, name: str = "j", family: str = "neuron", resource: str = "neuron_cores") -> Job:
    return Job(id=name, name=name, workers=workers, devices_per_worker=per, family=family, resource=resource)


def test_refusal_names_the_largest_job_of_that_worker_size_that_fits_now() -> None:
    parts = fixture_view()  # p1 has 4 of 8 cores held by an actor
    with pytest.raises(PlacementError) as e:
        Pack().allocate(job(4, 8, "big"), parts)
    msg = str(e.value)
    assert e.value.largest_workers == 3 and e.value.largest_worker == 8
    assert "job 'big' asks 4 worker(s) x 8 neuron_cores (32 in all)" in msg
    assert "the largest job of 8 neuron_cores per worker that fits is 3 worker(s) (24 neuron_cores)" in msg
    assert f"{parts[1].host}/p1 4/8" in msg and parts[1].host == "vm_192.0.2.2"
    with pytest.raises(PlacementError, match=r"no live partition offers gpu/GPU \(live partitions offer: neuron/"):
        Pack().allocate(job(1, 1, "g", "gpu", "GPU"), parts)


def test_pack_fills_a_partly_used_partition_when_the_landing_is_known_to_be_aligned() -> None:
    parts = fixture_view()  # p1: 4 of 8 cores held by something ray-accel did not place
    # Ray does not say which 4 are free: a whole partition is the sure aligned landing.
    assert [s.partition for s in Pack().allocate(job(1, 4), parts).workers] != ["p1"]
    # Held by a 4-core worker ray-accel placed: lowest-first grants leave 12-15 free, aligned.
    running = Assignment(job(1, 4, "old"), (Slot(parts[1].host, "p1", parts[1].node_id),), True, True)
    a = Pack().allocate(job(1, 4), mark_held(parts, running))
    assert [s.partition for s in a.workers] == ["p1"] and a.aligned
    two = Pack().optimize([job(1, 2, "x"), job(1, 2, "y")], parts, {})
    assert len({s.partition for a in two.assignments.values() for s in a.workers}) == 1, "both in one partition"


def test_pack_uses_the_fewest_partitions() -> None:
    parts = fixture_view()
    a = Pack().allocate(job(8, 2), parts)
    assert len({s.partition for s in a.workers}) == 2
    assert a.aligned


def test_pack_takes_linked_partitions_when_the_fit_is_equal() -> None:
    fresh = tuple(replace(p, free=p.total) for p in fixture_view())
    a = Pack().allocate(job(2, 8), fresh)
    first, second = (next(p for p in fresh if p.name == s.partition) for s in a.workers)
    assert first.linked_to(second) and a.connected and a.aligned


def test_topology_takes_linked_partitions_of_one_host() -> None:
    parts = fixture_view()  # p0, p2, p3 whole; p0-p2 are not linked on the torus
    a = Topology().allocate(job(2, 8), parts)
    used = {s.partition for s in a.workers}
    assert used in ({"p0", "p3"}, {"p2", "p3"}) and a.connected
    three = Topology().allocate(job(3, 8), parts)
    assert {s.partition for s in three.workers} == {"p0", "p2", "p3"} and three.connected, "linked through p3"


def test_topology_spans_the_fewest_hosts_roomiest_first_when_no_host_holds_the_job() -> None:
    """Hosts a (two linked partitions of 8 free cores), b (one of 8) and c
    (one of 4): 6 workers of 2 cores fit no partition but host a, and b and
    c, too small, are passed over; 10 workers fit no host alone, so they
    fill a, then the roomiest host left, b, and never need c."""

    def part(host: str, i: int, free: int, links: frozenset[int] = frozenset()) -> FreePartition:
        cores, devices = tuple(range(8 * i, 8 * i + 8)), tuple(range(4 * i, 4 * i + 4))
        name = f"p{i}"
        return FreePartition(
            host=host,
            name=name,
            node_id=f"{host}-{name}",
            family="neuron",
            resource="neuron_cores",
            total=8,
            free=free,
            core_ids=cores,
            device_ids=devices,
            links=links,
            connected=True,
        )

    parts = (part("a", 0, 8, frozenset(range(4, 8))), part("a", 1, 8, frozenset(range(4))), part("b", 0, 8))
    parts += (part("c", 0, 4),)
    one_host = Topology().allocate(job(6, 2), parts)
    assert {s.host for s in one_host.workers} == {"a"} and one_host.connected
    two_hosts = Topology().allocate(job(10, 2), parts)
    assert Counter(s.host for s in two_hosts.workers) == {"a": 8, "b": 2}, two_hosts.workers


def test_spread_puts_workers_on_different_hosts() -> None:
    parts = [
        FreePartition(host=h, name="p0", node_id=f"{h}-0", family="neuron", resource="neuron_cores", total=8, free=8)
        for h in ("a", "b", "c")
    ]
    a = Spread().allocate(job(3, 2), parts)
    assert sorted(s.host for s in a.workers) == ["a", "b", "c"]
    assert not a.connected


def test_capacity_counts_cpus_when_asked() -> None:
    p = FreePartition(
        host="a", name="p0", node_id="n", family="neuron", resource="neuron_cores", total=8, free=8, cpus_free=1.0
    )
    assert capacity(job(4, 2), p) == 4
    assert (
        capacity(
            Job(
                id="c",
                name="c",
                workers=4,
                devices_per_worker=2,
                family="neuron",
                resource="neuron_cores",
                cpus_per_worker=1.0,
            ),
            p,
        )
        == 1
    )


@badinput("unnamed")
@pytest.mark.parametrize(
    "kw",
    [dict(workers=0), dict(devices_per_worker=-1), dict(workers=True), dict(cpus_per_worker=float("nan"))],
)
def test_a_bad_job_is_refused_naming_the_value(kw: dict[str, object]) -> None:
    base: dict[str, object] = dict(
        id="j", name="j", workers=1, devices_per_worker=1, family="neuron", resource="neuron_cores"
    )
    with pytest.raises(ValueError, match="job 'j'"):
        Job(**{**base, **kw})  # type: ignore[arg-type]


@badinput("unnamed")
def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown placement policy 'best'"):
        get_policy("best")


def test_a_policy_object_is_taken_as_it_is_and_a_job_id_twice_is_refused() -> None:
    pack = Pack()
    assert get_policy(pack) is pack
    with pytest.raises(ValueError, match="job id 'x' appears twice"):
        pack.optimize([job(1, 2, "x"), job(1, 4, "x")], fixture_view(), {})
