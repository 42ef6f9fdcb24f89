"""The collector's fast paths read what the straightforward ones read.

`parse_stat` (one split of a stat line) reads the same fields as a plain
reading of proc(5): the comm up to the last ')', then fields one space apart;
it decodes the comm and state as a plain decode of the line's bytes (it keeps
decoded names); `process_table` finds the same parents as that reading."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ray_accel.core.processes import PAGE_SIZE, ProcessTable, parse_stat, process_table, read_small, split_stat

# proc(5): "pid (comm) state ppid ..." ; comm may hold spaces and ')'.
comm = st.binary(min_size=0, max_size=15).filter(lambda b: b"\n" not in b)
field = st.one_of(st.integers(0, 2**40).map(lambda i: str(i).encode()), st.sampled_from([b"x", b"-1", b""]))
state = st.sampled_from([b"R", b"S", b"D", b"Z", b"X", b"I", b"\xff", b""])


def _line(pid: int, name: bytes, state: bytes, fields: list[bytes]) -> bytes:
    return f"{pid} (".encode() + name + b") " + state + b" " + b" ".join(fields) + b"\n"


@settings(max_examples=300, deadline=None)
@given(name=comm, state=state, fields=st.lists(field, min_size=0, max_size=30))
def test_the_split_agrees_with_a_plain_reading(name: bytes, state: bytes, fields: list[bytes]) -> None:
    line = _line(42, name, state, fields)
    rest = line[line.rfind(b")") + 2 :].rstrip(b"\n").split(b" ")
    try:
        plain = (
            name.decode("utf-8", "replace"),
            rest[0].decode("ascii", "replace"),
            int(rest[1]),
            int(rest[2]),
            int(rest[11]) + int(rest[12]),
            int(rest[19]),
            int(rest[21]) * PAGE_SIZE,
        )
    except (ValueError, IndexError):
        plain = None
    stat = parse_stat(42, line)
    assert (stat[1:] if stat is not None else None) == plain


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.dictionaries(
        st.integers(1, 4_194_304),
        st.tuples(comm, state, st.one_of(st.integers(0, 4_194_304).map(lambda i: str(i).encode()), field), field),
        max_size=8,
    )
)
def test_the_table_finds_each_lines_parent(
    tmp_path_factory: object, lines: dict[int, tuple[bytes, bytes, bytes, bytes]]
) -> None:
    proc = Path(tmp_path_factory.mktemp("proc"))  # type: ignore[attr-defined]
    raw = {}
    for pid, (name, st_, ppid, rest) in lines.items():
        raw[pid] = _line(pid, name, st_, [ppid, rest, *[b"0"] * 20])  # the 24 fields a table reads
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "stat").write_bytes(raw[pid])
    (proc / "self").mkdir()  # not a PID: skipped
    read = process_table(str(proc))
    expected: dict[int, list[int]] = {}
    for pid, line in raw.items():
        # proc(5): comm ends at the last ')', then fields one space apart: the state, the parent.
        try:
            parent = int(line[line.rfind(b")") + 2 :].split(b" ")[1])
        except ValueError:
            continue
        expected.setdefault(parent, []).append(pid)
    assert {k: sorted(v) for k, v in read.children.items()} == {k: sorted(v) for k, v in expected.items()}
    assert read.lines == {pid: raw[pid] for kids in expected.values() for pid in kids}
    assert {pid: read.stat(pid) for pid in read.lines} == {pid: parse_stat(pid, raw[pid]) for pid in read.lines}
    assert read.fields == {pid: read.stat(pid) for pid in read.lines}  # the first read parses every line


def _process(proc: Path, pid: int, ppid: int, cpu: int = 0) -> None:
    """A process of a fake `/proc`, its stat line rewritten in place if it is there."""
    (proc / str(pid)).mkdir(exist_ok=True)
    fields = [str(ppid).encode(), *[b"0"] * 9, str(cpu).encode(), *[b"0"] * 10]  # utime: field 14
    (proc / str(pid) / "stat").write_bytes(_line(pid, b"w", b"S", fields))


def test_a_kept_table_reads_the_tree_new_processes_and_those_whose_parent_ended(tmp_path: Path) -> None:
    proc = tmp_path
    for pid, ppid in ((1, 0), (10, 1), (11, 10), (12, 11), (20, 1), (21, 20)):
        _process(proc, pid, ppid)
    table = ProcessTable(str(proc)).read(10)
    assert set(table.fields) == {1, 10, 11, 12, 20, 21}
    _process(proc, 11, 10, cpu=5)
    _process(proc, 20, 1, cpu=5)
    table.read(10)
    # The tree, and 1 (its parent outside the namespace); 20's line is kept, as it was.
    assert set(table.fields) == {1, 10, 11, 12}
    assert (changed := table.fields[11]) is not None and changed.cpu_ticks == 5
    stat = table.stat(20)
    assert stat is not None and stat.cpu_ticks == 0
    # 20 ends and its PID is reused by a child of the root (a new directory: a new inode); 12 ends.
    (proc / "20.new").mkdir()
    shutil.rmtree(proc / "20")
    (proc / "20.new").rename(proc / "20")
    _process(proc, 20, 10)
    shutil.rmtree(proc / "12")
    table.read(10)
    assert set(table.fields) == {1, 10, 11, 20, 21}  # 21: its parent ended
    assert table.children == {0: [1], 1: [10], 10: [11, 20], 20: [21]}
    _process(proc, 30, 21)
    table.read(10)
    assert set(table.fields) == {1, 10, 11, 20, 21, 30} and 30 in table.children[21]
    assert len(table) == 6


def test_a_table_answers_as_the_full_parse_for_this_process() -> None:
    table = process_table()
    me = os.getpid()
    assert isinstance(table, ProcessTable) and me in table
    raw = read_small(f"/proc/{me}/stat")
    assert raw is not None
    mine = table.stat(me)
    stat = parse_stat(me, raw)
    assert stat is not None and mine is not None
    assert (mine.name, mine.state, mine.ppid, mine.start_ticks) == (stat.name, stat.state, stat.ppid, stat.start_ticks)
    assert mine.rss_bytes > 0
    assert table.stat(-1) is None


@settings(max_examples=300, deadline=None)
@given(name=comm, state=state, fields=st.lists(field, min_size=22, max_size=30))
def test_the_parse_decodes_comm_and_state_as_a_plain_decode_every_time(
    name: bytes, state: bytes, fields: list[bytes]
) -> None:
    line = _line(42, name, state, fields)
    # Twice: the first parse may decode the name, the second finds it kept.
    for u in (parse_stat(42, line), parse_stat(42, line)):
        if u is not None:
            assert u.name == name.decode("utf-8", "replace")
            assert u.state == fields_state(line)


def fields_state(line: bytes) -> str:
    return line[line.rfind(b")") + 2 :].split(b" ", 1)[0].decode("ascii", "replace")


def test_kept_names_are_bounded_and_still_right_after_they_are_dropped() -> None:
    from ray_accel.core import processes

    fields = [b"1"] * 22
    for i in range(processes._COMMS_MAX + 10):
        u = parse_stat(42, _line(42, f"w{i}".encode(), b"S", fields))
        assert u is not None and u.name == f"w{i}"
        assert len(processes._COMMS) <= processes._COMMS_MAX
    u = parse_stat(42, _line(42, b"w0", b"S", fields))
    assert u is not None and u.name == "w0"


def test_a_kept_table_lists_proc_again_once_loadavg_says_a_task_began_or_ended(tmp_path: Path) -> None:
    proc = tmp_path
    (proc / "loadavg").write_bytes(b"0.00 0.00 0.00 1/100 10\n")
    for pid, ppid in ((1, 0), (10, 1)):
        _process(proc, pid, ppid)
    table = ProcessTable(str(proc)).read(10)
    _process(proc, 11, 10)  # a fake: on a host, the last PID given out would be 11 now
    (proc / "loadavg").write_bytes(b"0.00 0.00 0.00 2/100 10\n")  # only the running count moved
    assert 11 not in table.read(10) and set(table.fields) == {1, 10}
    (proc / "loadavg").write_bytes(b"0.00 0.00 0.00 2/101 11\n")
    assert 11 in table.read(10) and table.children[10] == [11]
    shutil.rmtree(proc / "11")
    _process(proc, 12, 1)
    (proc / "loadavg").write_bytes(b"0.00 0.00 0.00 2/101 12\n")  # as many tasks: one ended, one began
    assert 11 not in table.read(10) and 12 in table and len(table) == 3


# The `/proc` readers on input the live process table rarely gives: a
# directory where a small file should be, a stat line whose comm holds spaces
# and that is cut short.
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
