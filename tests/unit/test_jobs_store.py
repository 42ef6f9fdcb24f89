"""The job store's body and its Ray edges without a cluster: which
controllers it watches, what it forgets, and that sending or reading never
starts Ray and never fails the caller."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
import ray

from ray_accel.jobs import store
from ray_accel.jobs.model import STATE, SUBMITTED, Event, StateChange, Submitted
from ray_accel.jobs.store import JobStore, controller_dead, read_jobs, send


def submitted(job_id: str, at: float, controller: str = "") -> Event:
    return Event(SUBMITTED, job_id, at, Submitted(job_id, "", 1, 1, controller))


def finished(job_id: str, at: float) -> Event:
    return Event(STATE, job_id, at, StateChange("FINISHED"))


def test_only_the_controllers_of_unfinished_jobs_are_watched() -> None:
    s = JobStore()  # no gauge: nothing is exported
    s.record(submitted("a", 1.0, controller="ctl-a"))
    s.record(submitted("b", 2.0, controller="ctl-b"))
    s.record(submitted("c", 3.0))
    assert s.watched() == {"a": "ctl-a", "b": "ctl-b"}
    s.record(finished("a", 4.0))
    assert s.watched() == {"b": "ctl-b"}
    assert [j.id for j in s.list()] == ["a", "b", "c"]


def test_past_the_limit_the_oldest_finished_jobs_are_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "JOBS_MAX", 3)
    s = JobStore()
    for i, job in enumerate("abcd"):
        s.record(submitted(job, float(i), controller=f"ctl-{job}"))
    assert len(s.list()) == 4, "a job still running is never forgotten"
    s.record(finished("c", 10.0))
    assert [j.id for j in s.list()] == ["a", "b", "d"]
    s.record(finished("b", 11.0))
    s.record(finished("a", 12.0))
    s.record(submitted("e", 13.0))
    assert [j.id for j in s.list()] == ["b", "d", "e"], "of the finished, a, submitted first, went first"
    assert "a" not in s.controllers


@pytest.mark.parametrize(
    "answer, dead",
    [(SimpleNamespace(state="DEAD"), True), (SimpleNamespace(state="ALIVE"), False), (None, False), (OSError, False)],
)
def test_a_controller_is_dead_only_if_the_gcs_says_so(monkeypatch: pytest.MonkeyPatch, answer: Any, dead: bool) -> None:
    import ray.util.state

    def get_actor(actor_id: str, timeout: float) -> Any:
        assert actor_id == "ctl" and timeout == 5
        if answer is OSError:
            raise OSError("GCS unreachable")
        return answer

    monkeypatch.setattr(ray.util.state, "get_actor", get_actor)
    assert controller_dead("ctl") is dead


def test_an_event_sent_without_ray_is_logged_and_starts_no_cluster(caplog: pytest.LogCaptureFixture) -> None:
    assert not ray.is_initialized()
    with caplog.at_level(logging.WARNING, logger="ray_accel.jobs.store"):
        send(SUBMITTED, "j1", Submitted("j1"))
    assert "job j1 event submitted not recorded: Ray is not initialised here" in caplog.text
    assert not ray.is_initialized()


def test_an_event_waits_for_the_store_and_a_store_that_fails_never_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    sent: list[Event] = []
    waited: list[tuple[str, float]] = []
    handle = SimpleNamespace(record=SimpleNamespace(remote=lambda e: sent.append(e) or "ref"))
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(store, "store", lambda: handle)
    monkeypatch.setattr(ray, "get", lambda ref, timeout: waited.append((ref, timeout)))
    send(STATE, "j1", StateChange("FINISHED"), at=5.0, wait_s=2.0)
    send(STATE, "j1", StateChange("RUNNING"), at=4.0)
    assert [(e.kind, e.job_id, e.at) for e in sent] == [(STATE, "j1", 5.0), (STATE, "j1", 4.0)]
    assert waited == [("ref", 2.0)], "only a caller that asks waits"

    def unreachable() -> Any:
        raise ConnectionError("no GCS")

    monkeypatch.setattr(store, "store", unreachable)
    with caplog.at_level(logging.WARNING, logger="ray_accel.jobs.store"):
        send(STATE, "j1", StateChange("FINISHED"))
    assert "job j1 event state not recorded: no GCS" in caplog.text


def test_reading_a_cluster_without_a_store_finds_no_job_and_creates_none(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, str]] = []

    def get_actor(name: str, namespace: str) -> Any:
        asked.append((name, namespace))
        raise ValueError(f"Failed to look up actor with name '{name}'")

    monkeypatch.setattr(ray, "get_actor", get_actor)
    monkeypatch.setattr(ray, "remote", lambda *a, **k: pytest.fail("a reader created the store"))
    assert read_jobs() == [] and asked == [("jobs", "ray-accel")]
