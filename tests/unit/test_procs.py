"""Signalling recorded processes: what counts as Ray's by module, a signal
that cannot be sent, a process that ignores SIGTERM, a process group."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from ray_accel.cluster import procs
from ray_accel.core.processes import ProcessRecord

IGNORES_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
)


@pytest.fixture
def stubborn() -> Iterator[subprocess.Popen[str]]:
    """A process in a session of its own that ignores SIGTERM, reaped as soon as it ends."""
    p = subprocess.Popen(
        [sys.executable, "-c", IGNORES_TERM], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert p.stdout is not None and p.stdout.readline() == "ready\n"
    reaper = threading.Thread(target=p.wait, daemon=True)
    reaper.start()
    yield p
    if p.poll() is None:
        p.kill()
    reaper.join(5)


def test_a_module_of_an_unknown_kind_is_rays_only_under_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    assert procs.is_ray_process("new_kind", "-m ray.new_daemon")
    assert not procs.is_ray_process("new_kind", "-m torch.distributed.run")
    monkeypatch.setattr(procs, "find_spec", lambda name: None)
    assert not procs.is_ray_process("new_kind", "/usr/lib/python3/site-packages/ray/new_daemon")


def test_a_signal_that_cannot_be_sent_says_so() -> None:
    assert procs.send(0x7FFFFFFF, 0) is False


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(stubborn: subprocess.Popen[str]) -> None:
    record = ProcessRecord.of(stubborn.pid)
    assert record is not None
    assert procs.terminate([record], grace_s=0.2) == [stubborn.pid]
    assert stubborn.wait(5) == -9 and not record.alive()


def test_a_groups_members_are_its_live_processes_started_since_its_leader(stubborn: subprocess.Popen[str]) -> None:
    leader = ProcessRecord.of(stubborn.pid)
    assert leader is not None
    assert procs.group_members(stubborn.pid, leader.start_ticks) == [leader]
    assert procs.group_members(stubborn.pid, leader.start_ticks + 1) == [], "none started after it"
