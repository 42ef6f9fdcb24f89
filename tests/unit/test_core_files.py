"""ray_accel.core.files: bounded reads that refuse FIFOs and devices and never block."""

from __future__ import annotations

import errno
import os
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_accel.core import files
from ray_accel.core.files import UnreadableFile, describe, open_for_write, read_bytes, tail_lines, write_atomic
from tests.badinput import badinput


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=3000), limit=st.integers(0, 3000))
def test_regular_files_read_back_exactly_within_the_limit(data: bytes, limit: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f"
        path.write_bytes(data)
        if len(data) <= limit:
            assert files.read_bytes(path, limit) == data
            assert files.read_text(path, limit) == data.decode("utf-8", "replace")
        else:
            with pytest.raises(files.UnreadableFile, match=f"more than {limit} bytes"):
                files.read_bytes(path, limit)


@badinput("dangerous")
def test_a_fifo_is_refused_at_once_even_without_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "core_count"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(files.UnreadableFile, match="is a FIFO, not a regular file") as info:
        files.read_text(fifo)
    assert time.monotonic() - start < 2
    assert str(fifo) in str(info.value)
    assert "FIFO" in files.describe(info.value)


@badinput("dangerous")
def test_a_file_replaced_by_a_fifo_after_the_check_does_not_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race the second check exists for: stat sees a file, open gets a FIFO.
    path = tmp_path / "x"
    path.write_text("1")
    real_stat = os.stat

    def stat_then_swap(p: object, *a: object, **k: object) -> os.stat_result:
        result = real_stat(p)  # type: ignore[arg-type]
        path.unlink()
        os.mkfifo(path)
        return result

    monkeypatch.setattr(files.os, "stat", stat_then_swap)
    done: list[BaseException] = []

    def attempt() -> None:
        try:
            files.read_bytes(path)
        except BaseException as e:
            done.append(e)

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(2)
    assert not t.is_alive(), "read blocked on a FIFO"
    assert isinstance(done[0], files.UnreadableFile) and "FIFO" in str(done[0])


@badinput("dangerous")
@pytest.mark.parametrize("kind", ["directory", "char device", "socket"])
def test_other_kinds_are_refused_by_name(kind: str, tmp_path: Path) -> None:
    if kind == "directory":
        path, expected = tmp_path, "a directory"
    elif kind == "char device":
        path, expected = Path("/dev/null"), "a character device"
    else:
        path, expected = tmp_path / "s", "a socket"
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    with pytest.raises(files.UnreadableFile, match=expected):
        files.read_bytes(path)


def test_ordinary_errors_pass_through_and_are_described(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as missing:
        files.read_text(tmp_path / "absent")
    assert files.describe(missing.value) == "absent"
    assert files.describe(PermissionError(errno.EACCES, "Permission denied")) == "permission denied"
    with pytest.raises(ValueError, match="max_bytes"):
        files.read_bytes(tmp_path, -1)


def test_symlinks_to_regular_files_are_followed(tmp_path: Path) -> None:
    # sysfs reaches devices through links (/sys/class/neuron_device/neuronN).
    (tmp_path / "real").write_text("12, 3, 4, 1\n")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert files.read_text(tmp_path / "link") == "12, 3, 4, 1\n"


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=140_000), limit=st.integers(0, 140_000))
def test_an_attribute_reads_as_read_text_reads_it(data: bytes, limit: int) -> None:
    # Sizes past one 64 KiB read too: a full read is never taken for the end.
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "f")
        Path(path).write_bytes(data)
        if len(data) <= limit:
            assert files.read_attribute(path, limit) == files.read_text(path, limit)
        else:
            with pytest.raises(files.UnreadableFile, match=f"more than {limit} bytes"):
                files.read_attribute(path, limit)


@badinput("dangerous")
def test_an_attribute_that_is_a_fifo_or_a_directory_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "core_count"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(files.UnreadableFile, match="is a FIFO, not a regular file"):
        files.read_attribute(str(fifo), 64)
    assert time.monotonic() - start < 2
    with pytest.raises(files.UnreadableFile, match="is a directory, not a regular file"):
        files.read_attribute(str(tmp_path), 64)
    with pytest.raises(FileNotFoundError):
        files.read_attribute(str(tmp_path / "absent"), 64)
    with pytest.raises(files.UnreadableFile, match="NUL byte"):
        files.read_attribute("a\0b", 64)


# The file helpers where the path is not a plain file.
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


def test_a_link_is_refused_without_following_and_odd_errors_are_described(tmp_path: Path) -> None:
    target = tmp_path / "host.json"
    target.write_text("{}")
    (tmp_path / "link.json").symlink_to(target)
    assert read_bytes(tmp_path / "link.json") == b"{}"
    with pytest.raises(UnreadableFile, match="link.json is a symbolic link; refusing to follow it"):
        read_bytes(tmp_path / "link.json", follow=False)
    assert describe(OSError(errno.EIO, "Input/output error")) == "Input/output error"
    assert describe(OSError(errno.EPERM, "x")) == "permission denied"
    assert describe(OSError()) == "OSError"
