"""The collector's fast paths read what the straightforward ones read.

`parse_usage` (the collector's partial parse of a stat line) reads the same
comm, state, CPU ticks, start ticks and RSS as the full `parse_stat`, and the
comm and state as a plain decode of the line's bytes (it keeps decoded names);
`process_table` finds the same parents as `parent_pid`; the table-based
liveness check (`alive` with a table) answers as `current`, and the batch one
(`alive_all`) as `alive` record by record."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ray_accel.core.processes import (
    ProcessRecord,
    ProcessTable,
    alive,
    alive_all,
    current,
    parse_stat,
    parse_usage,
    process_table,
    read_raw_stat,
    table_in_use,
)

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


@settings(max_examples=300, deadline=None)
@given(
    name=comm,
    state=state,
    start=st.integers(0, 2**40),
    recorded=st.integers(0, 2**40),
    fields=st.lists(field, min_size=22, max_size=30),
)
def test_the_table_liveness_check_answers_as_the_full_one(
    name: bytes, state: bytes, start: int, recorded: int, fields: list[bytes]
) -> None:
    fields[18] = str(start).encode()  # field 22 of the line: the start time
    line = _line(7, name, state, fields)
    table = ProcessTable({7: line})
    for ticks in (recorded, start):
        if parse_stat(7, line) is not None:
            assert alive(7, ticks, table) == (current(7, ticks, table) is not None)
        else:
            # Malformed where only a full parse looks (ppid, pgrp; the kernel
            # never writes such a line): a line without a parent is not in the
            # table at all (it cannot be placed in a tree), and for one that
            # is, the usage fields decide. Found by seed 11.
            u = parse_usage(line)
            expected = 7 in table and u is not None and u.start_ticks == ticks and u.state not in ("Z", "X")
            assert alive(7, ticks, table) == expected
        assert ProcessRecord(7, ticks).alive(table) == alive(7, ticks, table)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.dictionaries(
        st.integers(1, 4_194_304),
        st.tuples(comm, state, st.one_of(st.integers(0, 4_194_304).map(lambda i: str(i).encode()), field), field),
        max_size=8,
    )
)
def test_the_table_finds_the_parents_parent_pid_finds(
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
    straight = ProcessTable(raw)  # parents found by parent_pid, line by line
    assert {k: sorted(v) for k, v in read.children.items()} == {k: sorted(v) for k, v in straight.children.items()}
    assert sorted(read) == sorted(straight)
    assert {pid: read.usage(pid) for pid in read} == {pid: parse_usage(raw[pid]) for pid in straight}


def test_a_table_answers_as_the_full_parse_for_this_process() -> None:
    table = process_table()
    me = os.getpid()
    assert isinstance(table, ProcessTable) and me in table
    raw = read_raw_stat(me)
    assert raw is not None
    usage = table.usage(me)
    stat = table.stat(me)
    assert stat is not None and usage is not None
    assert (usage.name, usage.state, usage.start_ticks) == (stat.name, stat.state, stat.start_ticks)
    assert usage.rss_bytes > 0 and table.usage(me) is usage, "parsed once per table"
    assert table.usage(-1) is None
    assert alive(me, stat.start_ticks, table) and not alive(me, stat.start_ticks + 1, table)
    assert not alive(-1, 0, table)


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


@settings(max_examples=200, deadline=None)
@given(
    lines=st.dictionaries(
        st.integers(1, 64),
        st.tuples(comm, state, st.integers(0, 50), st.lists(field, min_size=22, max_size=24)),
        max_size=8,
    ),
    recorded=st.dictionaries(st.integers(1, 80), st.integers(0, 50), max_size=12),
)
def test_the_batch_liveness_check_answers_as_the_single_one(
    lines: dict[int, tuple[bytes, bytes, int, list[bytes]]], recorded: dict[int, int]
) -> None:
    raw = {}
    for pid, (name, st_, start, fields) in lines.items():
        fields[0] = b"1"  # a parent, so the line is in the table
        fields[18] = str(start).encode()
        raw[pid] = _line(pid, name, st_, fields)
    table = ProcessTable(raw)
    expected = [pid for pid, start in recorded.items() if alive(pid, start, table)]
    assert alive_all(recorded, table) == table.alive(recorded) == expected
    assert table.usages(list(recorded)) == [table.usage(pid) for pid in recorded]


def test_the_batch_liveness_check_without_a_table_reads_proc() -> None:
    me = ProcessRecord.of()
    assert me is not None
    recorded = {me.pid: me.start_ticks, -1: 0, 999_999_999: 1}
    assert alive_all(recorded) == [me.pid]
    assert alive_all({me.pid: me.start_ticks + 1}) == [], "a reused PID is not the recorded process"


def test_liveness_checks_answer_from_the_table_in_use() -> None:
    """`table_in_use`: inside the block, `alive_all` without a table answers
    as the caller's table shows the processes (a backend the collector calls
    needs no parameter for it); outside, as /proc shows them now."""
    me = ProcessRecord.of()
    assert me is not None
    raw = read_raw_stat(os.getpid())
    assert raw is not None
    ghost = (1 << 22) + 1  # past PID_MAX_LIMIT (include/linux/threads.h): in the table only
    table = ProcessTable({ghost: str(ghost).encode() + raw[raw.index(b" ") :]})
    records = {ghost: me.start_ticks}
    assert alive_all(records) == []
    with table_in_use(table):
        assert alive_all(records) == [ghost]
        assert alive_all({os.getpid(): me.start_ticks}) == [], "this process is not in that table"
    assert alive_all(records) == [], "the table is in use only inside the block"
