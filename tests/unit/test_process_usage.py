"""`parse_usage` (the collector's partial parse of a stat line) reads the same
comm, CPU ticks and RSS as the full `parse_stat`, and refuses what it refuses
in those fields."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from ray_accel.core.processes import ProcessTable, parse_stat, parse_usage, process_table, read_raw_stat

# proc(5): "pid (comm) state ppid ..." ; comm may hold spaces and ')'.
comm = st.binary(min_size=0, max_size=15).filter(lambda b: b"\n" not in b)
field = st.one_of(st.integers(0, 2**40).map(lambda i: str(i).encode()), st.sampled_from([b"x", b"-1", b""]))


@settings(max_examples=300, deadline=None)
@given(name=comm, fields=st.lists(field, min_size=0, max_size=30))
def test_usage_agrees_with_the_full_parse(name: bytes, fields: list[bytes]) -> None:
    line = b"42 (" + name + b") S " + b" ".join(fields) + b"\n"
    full = parse_stat(42, line)
    part = parse_usage(line)
    if full is not None:
        assert part == (full.name, full.cpu_ticks, full.rss_bytes)
    else:
        assert part is None or len(line[line.rfind(b")") + 2 :].split(None, 22)) >= 22


def test_a_table_answers_as_the_full_parse_for_this_process() -> None:
    table = process_table()
    me = os.getpid()
    assert isinstance(table, ProcessTable) and me in table
    raw = read_raw_stat(me)
    assert raw is not None
    usage = table.usage(me)
    stat = table.stat(me)
    assert stat is not None and usage is not None
    assert usage[0] == stat.name == table.name(me) and usage[2] == stat.rss_bytes
    assert table.usage(-1) is None and table.name(-1) is None
