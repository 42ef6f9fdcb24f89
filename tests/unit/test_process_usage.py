"""The collector's fast paths read what the straightforward ones read.

`parse_usage` (the collector's partial parse of a stat line) reads the same
comm, state, CPU ticks, start ticks and RSS as the full `parse_stat`, and the
comm and state as a plain decode of the line's bytes (it keeps decoded names);
`process_table` finds the same parents as the full parse, and reads the
usage the full parse reads."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ray_accel.core.processes import ProcessTable, parse_stat, parse_usage, process_table, read_raw_stat

# proc(5): "pid (comm) state ppid ..." ; comm may hold spaces and ')'.
comm = st.binary(min_size=0, max_size=15).filter(lambda b: b"\n" not in b)
field = st.one_of(st.integers(0, 2**40).map(lambda i: str(i).encode()), st.sampled_from([b"x", b"-1", b""]))
state = st.sampled_from([b"R", b"S", b"D", b"Z", b"X", b"I", b"\xff", b""])


def _line(pid: int, name: bytes, state: bytes, fields: list[bytes]) -> bytes:
    return f"{pid} (".encode() + name + b") " + state + b" " + b" ".join(fields) + b"\n"


@settings(max_examples=300, deadline=None)
@given(name=comm, state=state, fields=st.lists(field, min_size=0, max_size=30))
def test_usage_agrees_with_the_full_parse(name: bytes, state: bytes, fields: list[bytes]) -> None:
    line = _line(42, name, state, fields)
    full = parse_stat(42, line)
    part = parse_usage(line)
    if full is not None:
        assert part == (full.name, full.state, full.cpu_ticks, full.start_ticks, full.rss_bytes)
    else:
        # A full parse also needs ppid and pgrp, which a usage reading does not.
        assert part is None or len(line[line.rfind(b")") + 2 :].split(None, 22)) >= 22


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
        raw[pid] = _line(pid, name, st_, [ppid, rest])
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "stat").write_bytes(raw[pid])
    (proc / "self").mkdir()  # not a PID: skipped
    read = process_table(str(proc))
    expected: dict[int, list[int]] = {}
    for pid, line in raw.items():
        # proc(5): comm ends at the last ')', then the one-letter state, then the parent.
        ppid, space, _ = line[line.rfind(b")") + 4 :].partition(b" ")
        try:
            parent = int(ppid)
        except ValueError:
            continue
        if space:
            expected.setdefault(parent, []).append(pid)
    assert {k: sorted(v) for k, v in read.children.items()} == {k: sorted(v) for k, v in expected.items()}
    assert read.lines == {pid: raw[pid] for kids in expected.values() for pid in kids}
    assert {pid: read.usage(pid) for pid in read.lines} == {pid: parse_usage(raw[pid]) for pid in read.lines}


def test_a_table_answers_as_the_full_parse_for_this_process() -> None:
    table = process_table()
    me = os.getpid()
    assert isinstance(table, ProcessTable) and me in table
    raw = read_raw_stat(me)
    assert raw is not None
    usage = table.usage(me)
    stat = parse_stat(me, raw)
    assert stat is not None and usage is not None
    assert (usage.name, usage.state, usage.start_ticks) == (stat.name, stat.state, stat.start_ticks)
    assert usage.rss_bytes > 0
    assert table.usage(-1) is None


@settings(max_examples=300, deadline=None)
@given(name=comm, state=state, fields=st.lists(field, min_size=22, max_size=30))
def test_usage_decodes_comm_and_state_as_a_plain_decode_every_time(
    name: bytes, state: bytes, fields: list[bytes]
) -> None:
    line = _line(42, name, state, fields)
    # Twice: the first parse may decode the name, the second finds it kept.
    for u in (parse_usage(line), parse_usage(line)):
        if u is not None:
            assert u.name == name.decode("utf-8", "replace")
            assert u.state == fields_state(line)


def fields_state(line: bytes) -> str:
    return line[line.rfind(b")") + 2 :].split(None, 1)[0].decode("ascii", "replace")


def test_kept_names_are_bounded_and_still_right_after_they_are_dropped() -> None:
    from ray_accel.core import processes

    fields = [b"1"] * 22
    for i in range(processes._COMMS_MAX + 10):
        u = parse_usage(_line(42, f"w{i}".encode(), b"S", fields))
        assert u is not None and u.name == f"w{i}"
        assert len(processes._COMMS) <= processes._COMMS_MAX
    u = parse_usage(_line(42, b"w0", b"S", fields))
    assert u is not None and u.name == "w0"
