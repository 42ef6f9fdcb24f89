"""The state directory's file helpers where the path is not a plain file, and
the host's amounts where they cannot be had."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ray_accel.cluster.host import allowed_cpus, read_host
from ray_accel.core.errors import InputError
from ray_accel.core.files import UnreadableFile, open_for_write, tail_lines, write_atomic
from tests.badinput import badinput


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_fifo_is_never_opened_for_writing_and_its_descriptor_is_closed(tmp_path: Path) -> None:
    fifo = tmp_path / "host.json"
    os.mkfifo(fifo)
    os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so the non-blocking open for writing succeeds
    before = open_fds()
    with pytest.raises(UnreadableFile, match="host.json is not a regular file"):
        open_for_write(fifo)
    assert open_fds() == before
    fd = open_for_write(tmp_path / "plain.json")
    os.write(fd, b"{}")
    os.close(fd)
    assert (tmp_path / "plain.json").read_bytes() == b"{}" and (tmp_path / "plain.json").stat().st_mode & 0o777 == 0o600


@badinput("dangerous")
def test_a_new_file_is_never_one_already_there_nor_a_link(tmp_path: Path) -> None:
    """`new`: a launch's report, its leader's PID, a token file: what a
    reader takes as written by us is never a file or link another put there."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("kept")
    (tmp_path / "p0.result.json").symlink_to(elsewhere)
    (tmp_path / "auth_token").write_text("theirs")
    for path in (tmp_path / "p0.result.json", tmp_path / "auth_token"):
        with pytest.raises(FileExistsError):
            open_for_write(path, new=True)
    assert elsewhere.read_text() == "kept" and (tmp_path / "auth_token").read_text() == "theirs"
    fd = open_for_write(tmp_path / "p0.leader.json", new=True)
    os.close(fd)
    assert (tmp_path / "p0.leader.json").stat().st_mode & 0o777 == 0o600


def test_a_failed_atomic_write_leaves_the_target_and_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "health.json"
    target.mkdir()  # a directory is never replaced by a file
    with pytest.raises(OSError):
        write_atomic(target, "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["health.json"] and target.is_dir()
    assert write_atomic(tmp_path / "ok.json", "{}").read_text() == "{}"


def test_the_tail_of_something_not_a_regular_file_is_empty(tmp_path: Path) -> None:
    assert tail_lines(tmp_path, 5) == [] and tail_lines(tmp_path / "none.log", 5) == []
    log = tmp_path / "raylet.err"
    log.write_text("one\n\n" + "x" * 20 + "\nlast\n")
    assert tail_lines(log, 5) == ["one", "x" * 20, "last"]
    assert tail_lines(log, 5, limit=10) == ["xxxx", "last"], "only the last `limit` bytes are read"


def test_an_object_store_as_large_as_the_host_is_refused_naming_the_flag() -> None:
    with pytest.raises(InputError, match=r"--object-store-memory \d+ leaves no memory for tasks"):
        read_host({"object_store_memory": 1 << 60})


def test_without_a_cpu_affinity_every_cpu_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(pid: int) -> set[int]:
        raise OSError("not here")

    monkeypatch.setattr(os, "sched_getaffinity", refused)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert allowed_cpus() == frozenset({0, 1, 2})
