from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from examples.hooks import Recording, RecordingHook
from ray_accel.core import reader
from ray_accel.core.processes import ProcessRecord
from ray_accel.hooks import ledger
from ray_accel.hooks.config import (
    RESOURCE_FILE_ENV,
    LifecycleHook,
    Workload,
    WorkloadConfig,
    WorkloadDenied,
    WorkloadRetry,
)
from ray_accel.hooks.ledger import LedgerEntry, hook_id, ledger_dir, open_entry, reconcile
from ray_accel.hooks.run import HookRun


@pytest.fixture(autouse=True)
def _hook_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYACCEL_HOOK_DIR", str(tmp_path / "ledger"))


def _events(log: Path) -> list[str]:
    import json

    return [json.loads(x)["event"] for x in log.read_text().splitlines()] if log.exists() else []


def test_full_cycle_applies_env_and_resource_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EXAMPLE_HOOK_TOKEN", raising=False)
    log = tmp_path / "log"
    run = HookRun("r1", Workload("w1", "p0", (0, 1)), [Recording(str(log))])
    run.pre_create()
    assert os.environ["EXAMPLE_HOOK_TOKEN"] == "granted"
    resource = Path(os.environ[RESOURCE_FILE_ENV])
    assert resource.read_text() == "LEASE=w1\n"
    run.post_create()
    assert run.pre_terminate(5)
    run.post_terminate()
    run.post_terminate()  # idempotent
    assert _events(log) == ["pre_create", "post_create", "pre_terminate", "post_terminate"]
    assert not resource.exists()
    assert list(ledger_dir("r1").iterdir()) == []
    monkeypatch.delenv(RESOURCE_FILE_ENV)


@pytest.mark.parametrize(
    ("kwargs", "error", "text"), [({"deny": "no quota"}, WorkloadDenied, "hook Recording denied workload w2: no quota")]
)
def test_denial_names_the_hook_and_still_terminates(
    kwargs: dict[str, str], error: type, text: str, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    run = HookRun("r2", Workload("w2", "p0"), [Recording(str(log), **kwargs)])
    with pytest.raises(error, match=text):
        run.pre_create()
    assert _events(log) == ["pre_create", "post_terminate"]


class Mounts(LifecycleHook):
    def pre_create(self) -> WorkloadConfig:
        return WorkloadConfig(mounts=(("/fsx/data", "/data"),))


def test_a_hook_returning_mounts_is_refused_naming_the_hook_and_the_field(tmp_path: Path) -> None:
    """docs/design.md, Hooks: a field that cannot apply to a Ray worker fails
    the workload; the other hooks' post_terminate still runs."""
    log = tmp_path / "log"
    run = HookRun("r5", Workload("w5", "p0"), [Recording(str(log)), Mounts])
    with pytest.raises(
        WorkloadDenied, match=r"hook .*Mounts returned a config that is not allowed: mounts=.*/fsx/data"
    ):
        run.pre_create()
    assert _events(log) == ["pre_create", "post_terminate"]
    assert list(ledger_dir("r5").iterdir()) == [], "no ledger entry left behind"


class SetsToken(LifecycleHook):
    def pre_create(self) -> WorkloadConfig:
        return WorkloadConfig(env_vars={"EXAMPLE_HOOK_TOKEN": "mine"})


class SameToken(LifecycleHook):
    def pre_create(self) -> WorkloadConfig:
        return WorkloadConfig(env_vars={"EXAMPLE_HOOK_TOKEN": "granted"}, resource_data={"LEASE": "w6"})


def test_two_hooks_setting_one_variable_differently_is_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EXAMPLE_HOOK_TOKEN", raising=False)
    log = tmp_path / "log"
    run = HookRun("r6", Workload("w6", "p0"), [Recording(str(log)), SetsToken])
    clash = r"hooks Recording and .*SetsToken set environment variable EXAMPLE_HOOK_TOKEN to different values"
    with pytest.raises(WorkloadDenied, match=clash):
        run.pre_create()
    assert _events(log) == ["pre_create", "post_terminate"]
    assert "EXAMPLE_HOOK_TOKEN" not in os.environ, "nothing of a refused config is applied"
    # The same value from two hooks is no conflict.
    agreed = HookRun("r7", Workload("w6", "p0"), [Recording(str(log)), SameToken])
    config = agreed.pre_create()
    assert config.env_vars == {"EXAMPLE_HOOK_TOKEN": "granted"} and config.resource_data == {"LEASE": "w6"}
    agreed.post_terminate()
    monkeypatch.delenv(RESOURCE_FILE_ENV, raising=False)


def test_retry(tmp_path: Path) -> None:
    log = tmp_path / "log"
    run = HookRun("r3", Workload("w3", "p0"), [Recording(str(log), retry_marker=str(tmp_path / "m"))])
    with pytest.raises(WorkloadRetry, match="asked to retry w3"):
        run.pre_create()
    assert _events(log) == ["pre_create", "post_terminate"]


class Hangs(LifecycleHook):
    def pre_terminate(self) -> None:
        time.sleep(30)


def test_pre_terminate_is_bounded() -> None:
    run = HookRun("r4", Workload("w4", "p0"), [Hangs])
    run.pre_create()
    start = time.monotonic()
    assert run.pre_terminate(0.3) is False
    assert time.monotonic() - start < 5
    run.post_terminate()


def test_reconcile_runs_post_terminate_once_for_a_dead_process(tmp_path: Path) -> None:
    log = tmp_path / "log"
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from examples.hooks import Recording; from ray_accel.hooks.config import Workload;"
        "from ray_accel.hooks.run import HookRun;"
        "HookRun('r5', Workload('dead', 'p0'), [Recording(sys.argv[2])]).pre_create()"
    )
    root = str(Path(__file__).resolve().parents[2])
    subprocess.run([sys.executable, "-c", code, root, str(log)], check=True, env=os.environ.copy())
    alive = HookRun("r5", Workload("alive", "p0"), [Recording(str(log))])
    alive.pre_create()
    assert reconcile("r5", [Recording(str(log))]) == ["dead"]
    assert reconcile("r5", [Recording(str(log))]) == [], "claimed once"
    assert _events(log) == ["pre_create", "pre_create", "post_terminate"]
    alive.post_terminate()
    assert reconcile("r5", [Recording(str(log))]) == []


def test_hook_factory_type_is_checked() -> None:
    class Bad(LifecycleHook):
        def pre_create(self):  # type: ignore[no-untyped-def]
            return {"env_vars": {}}

    with pytest.raises(TypeError, match="returned dict"):
        HookRun("r6", Workload("w6", "p0"), [Bad]).pre_create()


def test_recording_hook_class_is_a_factory() -> None:
    assert isinstance(Recording("/dev/null")(Workload("w", "p")), RecordingHook)


# The hook ledger's reconcile where an entry is unreadable, claimed by
# another worker first, or a hook fails; and an entry this process cannot
# describe itself for.
class FailsToTerminate(LifecycleHook):
    def post_terminate(self) -> None:
        raise RuntimeError("cleanup failed")


def dead_entry(run_id: str, workload_id: str, factories: list[Any]) -> Path:
    """An entry of this host for a process that has ended (this PID, another start time)."""
    me = ProcessRecord.of()
    assert me is not None
    entry = LedgerEntry(
        Workload(workload_id, "p0"),
        (me.pid, me.start_ticks + 1),
        ledger.this_host(),
        tuple(hook_id(f) for f in factories),
    )
    path = ledger.entry_path(run_id, workload_id)
    path.write_text(json.dumps(reader.dump(entry)))
    return path


def test_an_unreadable_entry_is_left_alone(caplog: pytest.LogCaptureFixture) -> None:
    bad = ledger_dir("r1") / "w1.json"
    bad.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="ray_accel.hooks.ledger"):
        assert reconcile("r1", [Recording("/dev/null")]) == []
    assert bad.exists() and f"unreadable hook ledger entry {bad} left alone" in caplog.text


def test_a_failing_hook_does_not_stop_the_others_and_the_entry_is_done(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "events"
    factories = [Recording(str(log)), FailsToTerminate]
    path = dead_entry("r2", "w2", factories)
    with caplog.at_level(logging.ERROR, logger="ray_accel.hooks.ledger"):
        assert reconcile("r2", factories) == ["w2"]
    assert "post_terminate hook failed while reconciling w2" in caplog.text
    assert [json.loads(x)["event"] for x in log.read_text().splitlines()] == ["post_terminate"]
    assert not path.exists() and list(ledger_dir("r2").iterdir()) == []


def test_an_entry_another_worker_claimed_first_is_left_to_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "events"
    factories = [Recording(str(log))]
    dead_entry("r3", "w3", factories)

    def taken(src: object, dst: object) -> None:
        raise FileNotFoundError(src)

    monkeypatch.setattr(os, "rename", taken)
    assert reconcile("r3", factories) == [] and not log.exists()


def test_a_process_that_cannot_read_its_own_proc_entry_opens_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ProcessRecord, "of", classmethod(lambda cls, pid=None: None))
    with pytest.raises(RuntimeError, match="cannot read this process's own /proc entry"):
        open_entry("r4", Workload("w4", "p0"), [Recording("/dev/null")])
    assert list(ledger_dir("r4").iterdir()) == []


class FailsBothWays(LifecycleHook):
    def pre_terminate(self) -> None:
        raise RuntimeError("device busy")

    def post_terminate(self) -> None:
        raise RuntimeError("cleanup failed")


def test_hooks_that_fail_while_a_workload_ends_are_logged_and_the_others_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("RAYACCEL_HOOK_DIR", str(tmp_path / "ledger"))
    log = tmp_path / "events"
    run = HookRun("r1", Workload("w1", "p0"), [Recording(str(log)), FailsBothWays])
    run.pre_create()
    with caplog.at_level(logging.WARNING, logger="ray_accel.hooks.run"):
        assert run.pre_terminate(5.0) is True, "a failure is an end, not a hang"
        run.post_terminate()
    assert "pre_terminate hook failed for w1" in caplog.text and "post_terminate hook failed for w1" in caplog.text
    assert [json.loads(x)["event"] for x in log.read_text().splitlines()] == [
        "pre_create",
        "pre_terminate",
        "post_terminate",
    ]
    assert list((tmp_path / "ledger").rglob("*.json")) == [], "the ledger entry is gone: nothing left to reconcile"
