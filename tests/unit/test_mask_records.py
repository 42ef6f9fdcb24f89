"""Published mask records: the parser, and the reader an exporter keeps
(`PublishedMasks`), which reads the directory again only when it changed and
checks every writer's liveness on every call."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Collection, Mapping
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_accel.core import masks
from ray_accel.core.files import write_atomic
from ray_accel.core.processes import ProcessRecord, current


@settings(max_examples=300, deadline=None)
@given(
    mask=st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"), max_size=40),
    start=st.integers(0, 2**63),
)
def test_a_record_as_publish_writes_it_parses_back(mask: str, start: int) -> None:
    assert masks.parse_record(f"{mask}\n{start}\n".encode()) == (mask, start)


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=60))
def test_any_bytes_parse_to_a_record_or_none(raw: bytes) -> None:
    record = masks.parse_record(raw)
    if record is not None:
        mask, start = record
        assert raw.startswith(mask.encode() + b"\n" + str(start).encode() + b"\n")


def test_malformed_records_are_refused() -> None:
    for raw in (b"", b"0,1", b"0,1\n", b"0,1\n12", b"0,1\n-3\n", b"0,1\nx\n", b"\xff\n12\n", b"0\n\xd9\xa3\n"):
        assert masks.parse_record(raw) is None, raw


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "60"])


def _record(directory: Path, pid: int, mask: str, in_place: bool = False) -> None:
    record = ProcessRecord.of(pid)
    assert record is not None
    path = directory / str(pid)
    if in_place:
        path.write_text(f"{mask}\n{record.start_ticks}\n")
    else:  # as `publish` does: a new file renamed over the old one
        write_atomic(path, f"{mask}\n{record.start_ticks}\n")


def live_masks(records: Mapping[int, tuple[str, int]], pids: Collection[int] | None = None) -> dict[int, str]:
    """PID -> mask of each record (of `pids` only, if given) whose writer is
    still the process that wrote it."""
    chosen = [pid for pid in records if pids is None or pid in pids]
    return {pid: records[pid][0] for pid in chosen if current(pid, records[pid][1]) is not None}


def fresh(pids: Collection[int] | None = None) -> dict[int, str]:
    """PID -> mask of every live writer, as one new read of the directory finds them."""
    return live_masks(masks.read_records(masks.mask_dir()), pids)


def _settle() -> None:
    """Wait until the directory's last change is past the settling time (its
    ctime, which `PublishedMasks` also watches, cannot be dated back)."""
    time.sleep(masks.SETTLED_NS / 1e9 * 1.5)


def test_the_reader_sees_every_change_and_answers_as_a_fresh_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(masks.MASK_DIR_ENV, str(tmp_path))
    procs = [_sleeper() for _ in range(3)]
    try:
        a, b, c = (p.pid for p in procs)
        reader = masks.PublishedMasks()
        assert live_masks(reader.records()) == {} == fresh()
        _record(tmp_path, a, "0,1")
        _record(tmp_path, b, "2")
        _settle()
        assert live_masks(reader.records()) == {a: "0,1", b: "2"} == fresh()
        first = reader.records()
        assert reader.records() is first, "an unchanged, settled directory is not read again"
        _record(tmp_path, b, "3")  # republished: the rename changes the directory
        _record(tmp_path, c, "4")
        assert live_masks(reader.records()) == {a: "0,1", b: "3", c: "4"} == fresh()
        assert live_masks(reader.records(), [a, c]) == {a: "0,1", c: "4"} == fresh([a, c])
        procs[0].kill()
        procs[0].wait()  # reaped: gone from the process table, its record stays
        kept = reader.records()
        assert live_masks(kept) == fresh() == {b: "3", c: "4"}, "liveness is checked on every use"
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_an_unsettled_directory_is_read_again_every_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A change within the directory's timestamp tick may keep its mtime: so a
    just-changed directory is read again each time, even a record rewritten
    in place (which does not touch the directory at all)."""
    monkeypatch.setenv(masks.MASK_DIR_ENV, str(tmp_path))
    proc = _sleeper()
    try:
        reader = masks.PublishedMasks()
        _record(tmp_path, proc.pid, "0")
        os.utime(tmp_path)  # changed now
        assert live_masks(reader.records()) == {proc.pid: "0"}
        _record(tmp_path, proc.pid, "5", in_place=True)
        assert live_masks(reader.records()) == {proc.pid: "5"} == fresh()
    finally:
        proc.kill()
        proc.wait()


def test_a_missing_directory_reads_as_no_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(masks.MASK_DIR_ENV, str(tmp_path / "absent"))
    assert live_masks(masks.PublishedMasks().records()) == {} == fresh()


def test_a_pure_test_publishes_into_its_sessions_folder_not_the_host_wide_one() -> None:
    """tests/conftest.py: the Ray tier's clusters run beside this tier and
    would see this process's records as orphans (CI, seed 822218610)."""
    host_wide = os.path.join(tempfile.gettempdir(), "ray-accel-masks")
    assert os.environ.get(masks.MASK_DIR_ENV) and masks.mask_dir() != host_wide


def test_a_mask_that_cannot_be_published_never_breaks_the_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv(masks.MASK_DIR_ENV, str(blocker / "masks"))
    masks.publish("0-3")  # no exception
    assert blocker.read_text() == ""
    monkeypatch.setenv(masks.MASK_DIR_ENV, str(tmp_path / "masks"))
    masks.publish("0-3")
    assert masks.read_records(str(tmp_path / "masks"))[os.getpid()][0] == "0-3"
