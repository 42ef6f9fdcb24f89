"""The hook ledger's reconcile where an entry is unreadable, claimed by
another worker first, or a hook fails; and an entry this process cannot
describe itself for."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from examples.hooks import Recording
from ray_accel.core import reader
from ray_accel.core.processes import ProcessRecord
from ray_accel.hooks import ledger
from ray_accel.hooks.config import LifecycleHook, Workload
from ray_accel.hooks.ledger import LedgerEntry, hook_id, ledger_dir, open_entry, reconcile


class FailsToTerminate(LifecycleHook):
    def post_terminate(self) -> None:
        raise RuntimeError("cleanup failed")


@pytest.fixture(autouse=True)
def _hook_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYACCEL_HOOK_DIR", str(tmp_path / "ledger"))


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
