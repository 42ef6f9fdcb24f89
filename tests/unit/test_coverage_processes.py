"""The `/proc` readers on input the live process table rarely gives: a
directory where a small file should be, a stat line whose comm holds spaces
and that is cut short."""

from __future__ import annotations

from pathlib import Path

from ray_accel.core.processes import read_small, split_stat


def test_a_small_read_of_a_directory_or_a_missing_file_is_none(tmp_path: Path) -> None:
    (tmp_path / "stat").write_bytes(b"1 (init) S 0")
    assert read_small(str(tmp_path / "stat")) == b"1 (init) S 0"
    assert read_small(str(tmp_path / "stat"), limit=3) == b"1 ("
    assert read_small(str(tmp_path)) is None, "a directory opens but cannot be read"
    assert read_small(str(tmp_path / "gone")) is None


def test_a_comm_with_spaces_is_one_field_and_a_line_cut_short_after_it_is_none() -> None:
    rest = b" ".join(b"%d" % i for i in range(3, 25))
    fields = split_stat(b"7 (ray::a b) S " + rest)
    assert fields is not None and fields[:4] == [b"7", b"(ray::a b)", b"S", b"3"]
    assert split_stat(b"7 (ray::a b c d) S " + b" ".join(b"1" for _ in range(19))) is None
    assert split_stat(b"7 (x) S 1") is None
