"""Signalling recorded processes: what counts as Ray's by module, a signal
that cannot be sent, a process that ignores SIGTERM, a process group, a
tree that starts children as it is stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from ray_accel.cluster import procs
from ray_accel.core.processes import ProcessRecord
from tests.tagged import new_tag, tagged, wait_none_tagged

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


# Starts children without pause, each in a session of its own (as a raylet
# starts its agents), until it is stopped.
SPAWNER = """
import subprocess, sys
print('ready', flush=True)
while True:
    subprocess.Popen(['sleep', '60'], start_new_session=True)
"""


@pytest.fixture
def spawner() -> Iterator[tuple[subprocess.Popen[str], dict[str, str]]]:
    """A SPAWNER in a session of its own, with some children started, and
    the tag every process of its tree carries; whatever carries it is
    killed at the end."""
    tag = new_tag()
    p = subprocess.Popen(
        [sys.executable, "-c", SPAWNER],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, **tag},
    )
    try:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        while len(tagged(tag)) < 4:  # the spawner and some children
            time.sleep(0.01)
        yield p, tag
    finally:
        for pid in tagged(tag):
            procs.send(pid, signal.SIGKILL)
        if p.poll() is None:
            p.kill()
        p.wait(5)


def test_a_tree_killed_while_it_starts_children_leaves_none_orphaned(
    spawner: tuple[subprocess.Popen[str], dict[str, str]],
) -> None:
    """`kill_tree` stops the tree before it kills it: a child born after a
    reading of /proc is seen by the next one instead of outliving its
    parent under PID 1 (a plain kill of one reading's tree leaves some)."""
    p, tag = spawner
    leader = ProcessRecord.of(p.pid)
    assert leader is not None
    killed = procs.kill_tree([leader])
    assert p.wait(5) == -9
    assert p.pid in killed and len(killed) > 1, killed
    assert wait_none_tagged(tag, timeout_s=2) == {}


def test_a_tree_terminated_while_it_starts_children_leaves_none_orphaned(
    spawner: tuple[subprocess.Popen[str], dict[str, str]],
) -> None:
    """`terminate` stops the tree as `kill_tree` does, then lets each member
    handle its SIGTERM."""
    p, tag = spawner
    leader = ProcessRecord.of(p.pid)
    assert leader is not None
    signalled = procs.terminate([leader], grace_s=5)
    assert p.wait(5) == -15, "it handled its SIGTERM once resumed"
    assert p.pid in signalled and len(signalled) > 1, signalled
    assert wait_none_tagged(tag, timeout_s=2) == {}
