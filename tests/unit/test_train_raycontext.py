"""Making Ray Train's own context agree with ray-accel's ranks.

The seam is exercised against Ray 2.60's real classes (its worker-side
`TrainContext`, `DistributedContext`, `DistributedTrainFnUtils`, read back
through the public `ray.train.get_context()`); the refusal path against a Ray
whose seam is missing. The integration tests (tests/integration/
test_train_context.py) run it in real workers.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from hypothesis import given
from hypothesis import strategies as st

from ray_accel.train import backend as backend_mod
from ray_accel.train import raycontext, worker
from ray_accel.train.ranks import assign_ranks
from ray_accel.train.raycontext import AGREES, DIFFERS, FAILED, FIXED, MISSING, PENDING, UNFIXABLE, RankSeamMissing

SEAM_MODULE = "ray.train.v2._internal.execution.context"
IP = "192.0.2.2"
RAYLETS = ["raylet-p0", "raylet-p0", "raylet-p1", "raylet-p1"]


def ours(raylets: list[str]) -> list[dict[str, int]]:
    import dataclasses

    return [dataclasses.asdict(p) for p in assign_ranks(raylets)]


def per_ip(n: int) -> list[dict[str, int]]:
    """What Ray Train V2 computes for n workers on one IP
    (worker_group.py:1094-1111): one local world of n, node rank 0."""
    return [
        {"world_rank": i, "world_size": n, "local_rank": i, "local_world_size": n, "node_rank": 0} for i in range(n)
    ]


@pytest.fixture
def v2_worker() -> Iterator[Any]:
    """This process made a Ray Train V2 worker, with Ray 2.60's own classes:
    what `RayTrainWorker.init_train_context` sets (worker.py:270-315)."""
    from ray.train.v2._internal.execution import context as ctx_mod
    from ray.train.v2._internal.execution import train_fn_utils

    def become(ranks: dict[str, int], cls: type = ctx_mod.TrainContext) -> Any:
        context = cls(
            train_run_context=None,
            distributed_context=ctx_mod.DistributedContext(**ranks),
            execution_context=None,
            storage_context=None,
            preemption_context=None,
            controller_actor=None,
            dataset_shard_provider=None,
        )
        ctx_mod.set_train_context(context)
        train_fn_utils.set_train_fn_utils(train_fn_utils.DistributedTrainFnUtils())
        return context

    try:
        yield become
    finally:
        ctx_mod.set_train_context(None)
        train_fn_utils.set_train_fn_utils(None)


def test_shared_ips_counts_raylets_not_workers() -> None:
    assert raycontext.shared_ips([IP] * 4, RAYLETS) == {IP: 2}
    assert raycontext.shared_ips([IP, IP, "192.0.2.3", "192.0.2.3"], RAYLETS) == {}, "one raylet per IP"


@given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=12))
def test_judge(raylets: list[str]) -> None:
    expected = ours(raylets)
    for e, ip_based in zip(expected, per_ip(len(raylets)), strict=True):
        assert raycontext.judge(e, e) == AGREES
        assert raycontext.judge(e, None) == PENDING
        assert raycontext.judge(e, {**e, "world_size": e["world_size"] + 1}) == PENDING, "not this job's context"
        verdict = raycontext.judge(e, ip_based)
        assert verdict == (AGREES if all(ip_based[k] == e[k] for k in raycontext.LOCAL_FIELDS) else DIFFERS)
    if len(raylets) > 1:
        swapped = {**expected[0], "world_rank": 1}
        assert raycontext.judge(expected[0], swapped) == UNFIXABLE, "Ray owns world ranks"


def test_the_seam_fixes_ray_train_v2s_public_context(v2_worker: Any) -> None:
    """In a worker holding Ray's per-IP context, ray.train.get_context() ends
    up reporting the per-raylet ranks; world rank and size stay Ray's."""
    import ray.train

    expected = ours(RAYLETS)
    for mine, rays in zip(expected, per_ip(4), strict=True):
        v2_worker(rays)
        assert raycontext.read_ray_ranks() == rays
        outcome = raycontext.align_in_worker(mine)
        assert outcome.status == (AGREES if rays == mine else FIXED), outcome
        ctx = ray.train.get_context()
        assert (ctx.get_local_rank(), ctx.get_local_world_size(), ctx.get_node_rank()) == (
            mine["local_rank"],
            mine["local_world_size"],
            mine["node_rank"],
        )
        assert (ctx.get_world_rank(), ctx.get_world_size()) == (rays["world_rank"], rays["world_size"])


def test_outside_a_train_worker_the_context_is_pending() -> None:
    """V1 runs Backend.on_start before its session exists: nothing to read
    yet, nothing refused, checked again at training start."""
    assert raycontext.read_ray_ranks() is None
    assert raycontext.align_in_worker(ours(RAYLETS)[1]).status == PENDING


def test_a_missing_seam_is_reported_as_missing(monkeypatch: pytest.MonkeyPatch, v2_worker: Any) -> None:
    """An untested Ray: the public context still groups by IP, but the worker
    context is not where Ray 2.60 keeps it."""
    v2_worker(per_ip(4)[1])
    monkeypatch.setitem(sys.modules, SEAM_MODULE, None)
    outcome = raycontext.align_in_worker(ours(RAYLETS)[1])
    assert outcome.status == MISSING
    assert outcome.reason.startswith(f"the seam is not there (Ray {ray.__version__}: has no module {SEAM_MODULE}")


def test_a_context_without_the_rank_fields_is_missing(monkeypatch: pytest.MonkeyPatch, v2_worker: Any) -> None:
    context = v2_worker(per_ip(4)[3])
    monkeypatch.setattr(context, "distributed_context", types.SimpleNamespace(local_rank=3))
    monkeypatch.setattr(raycontext, "read_ray_ranks", lambda: per_ip(4)[3])
    outcome = raycontext.align_in_worker(ours(RAYLETS)[3])
    assert outcome.status == MISSING and "holds no distributed_context with fields" in outcome.reason


def test_an_exception_while_changing_the_context_is_reported_as_such(v2_worker: Any) -> None:
    """The seam is there, but Ray's context refuses the change: that is an
    error with its type and message, not a missing seam."""
    from ray.train.v2._internal.execution import context as ctx_mod

    class Locked(ctx_mod.TrainContext):  # type: ignore[misc]
        def __setattr__(self, name: str, value: Any) -> None:
            if name == "distributed_context" and hasattr(self, name):
                raise PermissionError("the context is locked")
            super().__setattr__(name, value)

    v2_worker(per_ip(4)[1], Locked)
    outcome = raycontext.align_in_worker(ours(RAYLETS)[1])
    assert outcome.status == FAILED
    assert outcome.reason == "changing Ray Train's worker context raised PermissionError: the context is locked"
    assert outcome.ray == per_ip(4)[1]


def test_an_exception_while_reading_the_context_is_reported_as_such(
    monkeypatch: pytest.MonkeyPatch, v2_worker: Any
) -> None:
    """A getter of Ray's public context raising something other than its
    documented "no context yet" RuntimeError is an error, not PENDING."""
    context = v2_worker(per_ip(4)[2])

    def broken() -> int:
        raise ValueError("rank table is corrupt")

    monkeypatch.setattr(type(context), "get_local_rank", lambda self: broken())
    outcome = raycontext.align_in_worker(ours(RAYLETS)[2])
    assert outcome == raycontext.Alignment(
        FAILED, None, "reading ray.train.get_context() raised ValueError: rank table is corrupt"
    )


def test_refusal_names_the_ray_version_the_ip_and_the_reason() -> None:
    bad = [raycontext.Alignment(UNFIXABLE, None, "the seam is gone")] + [raycontext.Alignment(AGREES)] * 3
    msg = raycontext.refusal(bad, {IP: 2}, "9.1.0", at_start=False)
    assert msg is not None
    assert msg.startswith("Ray 9.1.0: ") and f"{IP} hosts 2" in msg and "the seam is gone" in msg
    assert "ray.train.get_context()" in msg
    assert raycontext.refusal(bad, {}, "9.1.0", at_start=False) is None, "one raylet per IP: nothing to fix"
    pending = [raycontext.Alignment(PENDING)] * 4
    assert raycontext.refusal(pending, {IP: 2}, "9.1.0", at_start=False) is None, "V1 before its session"
    late = raycontext.refusal(pending, {IP: 2}, "9.1.0", at_start=True)
    assert late is not None and "holds no ranks for this job" in late


def test_refusal_tells_an_error_apart_from_a_missing_seam() -> None:
    missing = [raycontext.Alignment(MISSING, None, "the seam is not there (Ray 9.1.0: has no module m)")]
    failed = [raycontext.Alignment(FAILED, None, "changing Ray Train's worker context raised PermissionError: locked")]
    for_missing = raycontext.refusal(missing, {IP: 2}, "9.1.0", at_start=False)
    for_failed = raycontext.refusal(missing + failed, {IP: 2}, "9.1.0", at_start=False)
    assert for_missing is not None and for_failed is not None
    assert "has no module m" in for_missing and "use a tested Ray version" in for_missing
    assert "correction failed: changing Ray Train's worker context raised PermissionError: locked" in for_failed
    assert "not a Ray version without the seam" in for_failed and "use a tested Ray version" not in for_failed


class FakeWorkerGroup:
    """A Ray Train worker group as the backend sees it, running each worker's
    function here. `ray_ranks[i]` is what `ray.train.get_context()` reports
    in worker i. No `get_workers`: not Ray 2.60's V2 group."""

    def __init__(self, ips: list[str], ray_ranks: list[dict[str, int] | None]) -> None:
        self.ips, self.ray_ranks = ips, ray_ranks
        self.called: list[str] = []
        self._current = 0

    def _run(self, i: int, fn: Any, *args: Any) -> Any:
        self.called.append(fn.__name__)
        self._current = i
        return fn(*args)

    def current_ray_ranks(self) -> dict[str, int] | None:
        return self.ray_ranks[self._current]

    def execute(self, fn: Any, *args: Any) -> list[Any]:
        if fn is worker.describe:
            self.called.append("describe")
            return [
                worker.WorkerFacts(
                    node_id=r,
                    ip=ip,
                    host="h",
                    pid=1000 + i,
                    partition=r[-2:],
                    family=None,
                    visible_ids_env=None,
                    accelerator_type=None,
                    own_ids=(str(2 * i), str(2 * i + 1)),
                    collective="gloo",
                )
                for i, (r, ip) in enumerate(zip(RAYLETS, self.ips, strict=True))
            ]
        return [self._run(i, fn, *args) for i in range(len(self.ips))]

    def execute_single_async(self, i: int, fn: Any, *args: Any) -> Any:
        return self._run(i, fn, *args)

    def execute_single(self, i: int, fn: Any, *args: Any) -> Any:
        return self._run(i, fn, *args)


@pytest.fixture
def untested_ray(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The seam's module is gone; results come back without a cluster."""
    monkeypatch.setitem(sys.modules, SEAM_MODULE, None)
    monkeypatch.setattr(
        backend_mod, "ray", types.SimpleNamespace(get=lambda refs, **_: refs, __version__=ray.__version__)
    )
    yield


def test_fit_is_refused_at_start_when_the_seam_is_missing_on_a_shared_ip(
    monkeypatch: pytest.MonkeyPatch, untested_ray: None
) -> None:
    group = FakeWorkerGroup([IP] * 4, list(per_ip(4)))
    monkeypatch.setattr(raycontext, "read_ray_ranks", group.current_ray_ranks)
    config = types.SimpleNamespace(backend="gloo", run_id="r", hooks=(), timeout_s=5, pre_terminate_timeout_s=1)
    with pytest.raises(RankSeamMissing) as err:
        backend_mod.AcceleratorBackend().on_start(group, config)
    msg = str(err.value)
    assert msg.startswith(f"Ray {ray.__version__}: ") and f"{IP} hosts 2" in msg and SEAM_MODULE in msg
    assert "prepare" not in group.called, "refused before any hook ran"


def test_fit_is_refused_at_start_naming_an_exception_raised_by_rays_context(
    monkeypatch: pytest.MonkeyPatch, untested_ray: None
) -> None:
    group = FakeWorkerGroup([IP] * 4, list(per_ip(4)))

    def raising() -> dict[str, int]:
        raise KeyError("local_rank")

    monkeypatch.setattr(raycontext, "read_ray_ranks", raising)
    config = types.SimpleNamespace(backend="gloo", run_id="r", hooks=(), timeout_s=5, pre_terminate_timeout_s=1)
    with pytest.raises(RankSeamMissing) as err:
        backend_mod.AcceleratorBackend().on_start(group, config)
    assert "correction failed: reading ray.train.get_context() raised KeyError: 'local_rank'" in str(err.value)
    assert "prepare" not in group.called, "refused before any hook ran"


def test_one_partition_per_ip_needs_nothing_and_fails_nothing(
    monkeypatch: pytest.MonkeyPatch, untested_ray: None
) -> None:
    """Two hosts, one raylet each: Ray's per-IP ranks are the per-raylet ranks."""
    ips = [IP, IP, "192.0.2.3", "192.0.2.3"]
    expected = ours(RAYLETS)
    group = FakeWorkerGroup(ips, list(expected))
    monkeypatch.setattr(raycontext, "read_ray_ranks", group.current_ray_ranks)
    shared = raycontext.shared_ips(ips, RAYLETS)
    outcomes = backend_mod.align_ray_context(group, expected, shared, at_start=False)
    assert [o.status for o in outcomes] == [AGREES] * 4


def test_v1_is_checked_again_when_training_starts(monkeypatch: pytest.MonkeyPatch, untested_ray: None) -> None:
    expected = ours(RAYLETS)
    shared = {IP: 2}
    before = FakeWorkerGroup([IP] * 4, [None] * 4)  # no session yet
    monkeypatch.setattr(raycontext, "read_ray_ranks", before.current_ray_ranks)
    assert {o.status for o in backend_mod.align_ray_context(before, expected, shared, at_start=False)} == {PENDING}
    right = FakeWorkerGroup([IP] * 4, list(expected))  # V1's node-id ranks
    monkeypatch.setattr(raycontext, "read_ray_ranks", right.current_ray_ranks)
    assert {o.status for o in backend_mod.align_ray_context(right, expected, shared, at_start=True)} == {AGREES}
    wrong = FakeWorkerGroup([IP] * 4, list(per_ip(4)))  # a Ray that groups by IP and has no seam
    monkeypatch.setattr(raycontext, "read_ray_ranks", wrong.current_ray_ranks)
    with pytest.raises(RankSeamMissing, match=f"Ray {ray.__version__}: "):
        backend_mod.align_ray_context(wrong, expected, shared, at_start=True)


def test_the_controller_view_is_replaced_on_a_v2_shaped_group() -> None:
    from ray.train.v2._internal.execution.context import DistributedContext

    expected = ours(RAYLETS)
    workers = [types.SimpleNamespace(distributed_context=DistributedContext(**r)) for r in per_ip(4)]
    group = types.SimpleNamespace(get_workers=lambda: workers)
    assert raycontext.set_controller_view(group, expected) == raycontext.Alignment(FIXED)
    assert [w.distributed_context.local_rank for w in workers] == [0, 1, 0, 1]
    assert [w.distributed_context.node_rank for w in workers] == [0, 0, 1, 1]
    assert [w.distributed_context.world_rank for w in workers] == [0, 1, 2, 3]
    v1 = raycontext.set_controller_view(types.SimpleNamespace(), expected)
    assert v1.status == MISSING and "has no get_workers" in v1.reason, "a V1 group: untouched"


def test_an_exception_on_the_controller_is_reported_not_dropped() -> None:
    from ray.train.v2._internal.execution.context import DistributedContext

    def inactive() -> list[Any]:
        raise AssertionError("Worker group is not active")

    view = raycontext.set_controller_view(types.SimpleNamespace(get_workers=inactive), ours(RAYLETS))
    assert view == raycontext.Alignment(
        FAILED, None, "reading Ray Train's controller view raised AssertionError: Worker group is not active"
    )
    others = [types.SimpleNamespace(distributed_context=DistributedContext(**r)) for r in per_ip(2)]
    mismatch = raycontext.set_controller_view(types.SimpleNamespace(get_workers=lambda: others), ours(RAYLETS))
    assert mismatch.status == UNFIXABLE and "[0, 1] for 4 workers" in mismatch.reason
    assert [w.distributed_context.local_rank for w in others] == [0, 1], "untouched"
