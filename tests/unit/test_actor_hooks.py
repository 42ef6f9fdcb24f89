"""`@with_hooks` on an actor class: where its terminate hooks run.

Ray Serve ends a replica by calling its deployment class's `__del__`, then
killing the actor (Serve 2.60 `serve/_private/replica.py`,
`call_destructor`, which awaits an `async def __del__`); a plain actor's
`__del__` runs when Python collects it. The hooks' workload is built here
instead of read from a Ray worker's runtime context. Each test records into
a list of its own: Python may collect an instance of another test later.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from ray_accel.hooks import tasks
from ray_accel.hooks.config import LifecycleHook, Workload
from ray_accel.hooks.ledger import HOOK_DIR_ENV, HookFactory
from ray_accel.hooks.tasks import with_hooks


class Logged(LifecycleHook):
    def __init__(self, workload: Workload, events: list[str]) -> None:
        super().__init__(workload)
        self.events = events

    def pre_terminate(self) -> None:
        self.events.append("pre_terminate")

    def post_terminate(self) -> None:
        self.events.append("post_terminate")


def logged(events: list[str]) -> HookFactory:
    return lambda workload: Logged(workload, events)


@pytest.fixture(autouse=True)
def a_workload(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(HOOK_DIR_ENV, str(tmp_path / "ledger"))
    monkeypatch.setattr(tasks, "_workload", lambda kind: Workload(f"{kind}-1", "p0", (0,), None))


def test_del_runs_the_terminate_hooks_around_the_classs_own_del_once() -> None:
    events: list[str] = []

    @with_hooks(logged(events), run_id="del")
    class Replica:
        def __del__(self) -> None:
            events.append("own __del__")

    replica: Any = Replica()
    replica.__del__()  # as Serve's graceful shutdown calls it
    replica.ray_accel_terminate()  # later calls (the process's exit) add nothing
    assert events == ["pre_terminate", "own __del__", "post_terminate"]
    replica.__del__()
    assert events == ["pre_terminate", "own __del__", "post_terminate", "own __del__"]


# Python's own collection of the instance at the test's end calls an async
# `__del__` without awaiting it, as it would the class's own.
@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")
def test_an_async_del_is_awaited_between_the_terminate_hooks() -> None:
    events: list[str] = []

    @with_hooks(logged(events), run_id="async-del")
    class Replica:
        async def __del__(self) -> None:
            await asyncio.sleep(0)
            events.append("own async __del__")

    replica: Any = Replica()
    asyncio.run(replica.__del__())
    assert events == ["pre_terminate", "own async __del__", "post_terminate"]


def test_a_class_without_del_runs_only_the_hooks_and_terminate_first_leaves_del_nothing() -> None:
    events: list[str] = []

    @with_hooks(logged(events), run_id="no-del")
    class Actor:
        pass

    first: Any = Actor()
    first.__del__()
    assert events == ["pre_terminate", "post_terminate"]
    second: Any = Actor()
    second.ray_accel_terminate()
    second.__del__()
    assert events == ["pre_terminate", "post_terminate"] * 2


def test_a_constructor_that_failed_before_its_hooks_leaves_del_only_the_classs_own() -> None:
    events: list[str] = []

    def failing(workload: Workload) -> LifecycleHook:
        raise RuntimeError("no device")

    @with_hooks(failing, run_id="failed")
    class Replica:
        def __del__(self) -> None:
            events.append("own __del__")

    replica: Any = Replica.__new__(Replica)
    with pytest.raises(RuntimeError, match="no device"):
        replica.__init__()
    replica.__del__()
    assert events == ["own __del__"]
