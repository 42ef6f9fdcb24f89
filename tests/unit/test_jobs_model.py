"""Job phases derived from Ray Train V2's controller states (pure; no Ray).

The state names and the order a run goes through them are Ray 2.60's
(`TrainControllerStateType`, ray/train/v2/_internal/execution/controller/
state.py:45-55; transitions in controller.py:636-723), as a
ControllerCallback (ray/train/v2/_internal/execution/callback.py) sees them
on a real run: a worker death is RUNNING -> RESTARTING -> SCHEDULING ->
RUNNING."""

from __future__ import annotations

import dataclasses

import hypothesis.strategies as st
import pytest
from hypothesis import given

from ray_accel.jobs.model import (
    KINDS,
    LOST,
    PHASES,
    RAY_STATE_PHASE,
    STARTING,
    STATE,
    SUBMITTED,
    TERMINAL,
    Event,
    Phase,
    Replica,
    Started,
    StateChange,
    Submitted,
    apply_event,
    gauge_rows,
    job_json,
    phase_for_state,
)
from ray_accel.jobs.store import JobStore
from tests.jobs_events import apply_all


def _replicas(n: int, partitions: list[str]) -> Started:
    return Started(
        tuple(
            Replica(
                world_rank=i,
                world_size=n,
                local_rank=0,
                local_world_size=1,
                node_rank=i,
                host="h1",
                partition=partitions[i],
                node_id=f"node{i}",
                devices=tuple(str(8 * i + k) for k in range(8)),
                pid=100 + i,
            )
            for i in range(n)
        )
    )


def _run(*steps: tuple[str, Submitted | StateChange | Started | None]) -> list[Event]:
    return [Event(kind, "j1", float(t), data) for t, (kind, data) in enumerate(steps)]


def state(name: str) -> tuple[str, StateChange]:
    return (STATE, StateChange(name))


SUBMIT = (SUBMITTED, Submitted("a16", "r1", 2, 2))


def test_a_run_that_succeeds_goes_pending_starting_running_succeeded_with_times() -> None:
    events = _run(
        SUBMIT,
        state("SCHEDULING"),
        (STARTING, _replicas(2, ["p0", "p1"])),
        state("RUNNING"),
        state("SHUTTING_DOWN"),
        state("FINISHED"),
    )
    job = apply_all(events)["j1"]
    assert [(t.phase.value, t.at) for t in job.transitions] == [
        ("Pending", 0.0),
        ("Starting", 2.0),
        ("Running", 3.0),
        ("Succeeded", 5.0),
    ]
    assert job.workers == 2 and (job.min_workers, job.max_workers) == (2, 2)
    assert job.partitions == ("h1/p0", "h1/p1") and job.hosts == ("h1",)
    assert [t.phase.value for t in job.replicas[0].transitions] == ["Starting", "Running", "Succeeded"]
    out = job_json(job, replicas=True)
    assert out["phase"] == "Succeeded" and out["replicas"][1]["devices"] == [str(i) for i in range(8, 16)]


def test_a_worker_death_is_restarting_then_running_then_succeeded_and_counted_once() -> None:
    events = _run(
        SUBMIT,
        state("SCHEDULING"),
        (STARTING, _replicas(2, ["p0", "p1"])),
        state("RUNNING"),
        state("RESTARTING"),
        state("SCHEDULING"),
        (STARTING, _replicas(2, ["p0", "p1"])),
        state("RUNNING"),
        state("SHUTTING_DOWN"),
        state("FINISHED"),
    )
    job = apply_all(events)["j1"]
    assert [t.phase.value for t in job.transitions] == [
        "Pending",
        "Starting",
        "Running",
        "Restarting",
        "Running",
        "Succeeded",
    ]
    assert job.restarts == 1 and job.attempts == 2
    assert [r.attempt for r in job.replicas] == [2, 2] and [r.attempt for r in job.retired] == [1, 1]
    assert [t.phase.value for t in job.retired[0].transitions] == ["Starting", "Running", "Restarting"]
    assert [t.phase.value for t in job.replicas[0].transitions] == ["Starting", "Restarting", "Running", "Succeeded"]


def test_an_elastic_resize_is_a_restart_with_the_new_size() -> None:
    events = _run(
        (SUBMITTED, Submitted("el", min_workers=2, max_workers=4)),
        state("SCHEDULING"),
        (STARTING, _replicas(2, ["p0", "p1"])),
        state("RUNNING"),
        state("RESIZING"),
        state("SCHEDULING"),
        (STARTING, _replicas(4, ["p0", "p1", "p2", "p3"])),
        state("RUNNING"),
    )
    job = apply_all(events)["j1"]
    assert job.phase is Phase.RUNNING and job.workers == 4 and (job.min_workers, job.max_workers) == (2, 4)
    assert job.restarts == 1


@pytest.mark.parametrize(
    ("ray_state", "phase"), [("ERRORED", "Failed"), ("ABORTED", "Failed"), ("NEW_STATE", "Unknown")]
)
def test_failed_aborted_and_unheard_of_states(ray_state: str, phase: str) -> None:
    job = apply_all(_run(SUBMIT, state("SCHEDULING"), state(ray_state)))["j1"]
    assert job.phase.value == phase and job.ray_state == ray_state


def test_a_controller_gone_before_the_end_makes_the_job_unknown_but_not_a_finished_one() -> None:
    running = apply_all(_run(SUBMIT, state("RUNNING"), (LOST, None)))["j1"]
    assert running.phase is Phase.UNKNOWN
    done = apply_all(_run(SUBMIT, state("FINISHED"), (LOST, None)))["j1"]
    assert done.phase is Phase.SUCCEEDED


def test_an_unknown_event_kind_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'bogus'"):
        apply_event(None, Event("bogus", "j1", 0.0))


def test_the_gauge_has_one_current_phase_per_job_and_the_store_exports_it() -> None:
    class Gauge:
        def __init__(self) -> None:
            self.values: dict[tuple[str, str], float] = {}

        def set(self, value: float, tags: dict[str, str]) -> None:
            self.values[(tags["job_id"], tags["phase"])] = value

    gauge = Gauge()
    s = JobStore(gauge)
    for e in _run(SUBMIT, state("SCHEDULING"), state("RUNNING")):
        s.record(e)
    assert {k for k, v in gauge.values.items() if v == 1} == {("j1", "Running")}
    assert len(gauge.values) == len(PHASES)
    listed = s.list()
    assert [j.phase.value for j in listed] == ["Running"] and "replicas" not in job_json(listed[0])
    assert job_json(listed[0], waiting={})["waiting"] is None and "waiting" not in job_json(listed[0])
    assert len(gauge_rows(list(s.jobs.values()))) == len(PHASES)


STATES = [*RAY_STATE_PHASE, "SOMETHING_NEW"]
EVENTS = st.one_of(
    st.sampled_from(STATES).map(lambda s: (STATE, StateChange(s))),
    st.integers(1, 4).map(lambda n: (STARTING, _replicas(n, [f"p{i}" for i in range(n)]))),
    st.just((LOST, None)),
    st.just(SUBMIT),
)


@given(st.lists(EVENTS, max_size=30))
def test_any_event_stream_gives_a_known_phase_times_in_order_and_terminal_is_final(
    steps: list[tuple[str, Submitted | StateChange | Started | None]],
) -> None:
    events = _run(SUBMIT, *steps)
    job = None
    for e in events:
        before = job
        job = apply_event(job, e)
        assert job.phase.value in PHASES
        if before is not None and before.phase in TERMINAL:
            assert job.phase is before.phase and job.transitions == before.transitions
    assert job is not None
    times = [t.at for t in job.transitions]
    assert times == sorted(times)
    assert all(a.phase is not b.phase for a, b in zip(job.transitions, job.transitions[1:], strict=False))
    assert job.restarts == sum(1 for t in job.transitions if t.phase is Phase.RESTARTING)
    assert {e.kind for e in events} <= set(KINDS)


def test_pending_after_a_restart_stays_restarting() -> None:
    assert phase_for_state(Phase.RESTARTING, "SCHEDULING") is None
    assert phase_for_state(Phase.RUNNING, "SHUTTING_DOWN") is None
    assert phase_for_state(Phase.SUCCEEDED, "RUNNING") is None


def test_each_attempt_shows_its_collective_and_why_auto_chose_it() -> None:
    why = "TorchNeuron supports Trainium2 and Trainium3 only, and this worker's devices are Trainium"
    jobs = apply_all(
        _run(
            SUBMIT,
            (STARTING, dataclasses.replace(_replicas(2, ["p0", "p1"]), collective="gloo", collective_reason=why)),
            state("RESTARTING"),
            (STARTING, dataclasses.replace(_replicas(2, ["p0", "p1"]), collective="neuron")),
        )
    )
    shown = job_json(jobs["j1"])
    assert (shown["collective"], shown["collective_reason"]) == ("neuron", ""), "the current attempt's"
    first = job_json(apply_all(_run(SUBMIT, (STARTING, Started((), "gloo", why))))["j1"])
    assert (first["collective"], first["collective_reason"]) == ("gloo", why)
