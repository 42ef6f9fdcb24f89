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
