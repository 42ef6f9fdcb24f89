"""ray_accel.core.reader: the one reader of untrusted input. Arbitrary input
never raises anything but `ReadError`; a refusal names the bad field's path;
`load(dump(v)) == v` for typed values."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_accel.core.errors import InputError
from ray_accel.core.reader import MAX_DEPTH, Cursor, ReadError, dump, load, parse_json, parse_toml, read_file
from tests.badinput import badinput


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Inner:
    pid: int
    name: str
    share: float | None = None


@dataclass(frozen=True)
class Outer:
    colour: Colour
    side: Literal["left", "right"]
    on: bool
    inner: Inner
    items: tuple[Inner, ...] = ()
    pairs: tuple[tuple[str, int], ...] = ()
    note: str | None = None


inners = st.builds(
    Inner,
    st.integers(-(1 << 63), (1 << 64) - 1),
    st.text(max_size=20),
    st.none() | st.floats(allow_nan=False, allow_infinity=False),
)
outers = st.builds(
    Outer,
    st.sampled_from(Colour),
    st.sampled_from(["left", "right"]),
    st.booleans(),
    inners,
    st.lists(inners, max_size=3).map(tuple),
    st.lists(st.tuples(st.text(max_size=5), st.integers(0, 9)), max_size=3).map(tuple),
    st.none() | st.text(max_size=10),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=30,
)


@given(outers)
def test_a_typed_value_round_trips_through_json(value: Outer) -> None:
    assert load(Outer, json.loads(json.dumps(dump(value))), "x") == value


@badinput("traceback")
@given(json_values)
def test_arbitrary_json_loads_or_is_refused_with_a_read_error(data: object) -> None:
    try:
        value = load(Outer, data, "v")
    except ReadError as e:
        assert str(e).startswith("v"), str(e)
    else:
        assert load(Outer, dump(value)) == value


def _paths(value: object, prefix: str) -> list[str]:
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            out += [f"{prefix}.{k}", *_paths(v, f"{prefix}.{k}")]
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += [f"{prefix}[{i}]", *_paths(v, f"{prefix}[{i}]")]
    return out


def _replace(data: Any, path: str, value: object) -> None:
    steps = path.replace("[", ".[").split(".")[1:]
    for step in steps[:-1]:
        data = data[int(step[1:-1])] if step.startswith("[") else data[step]
    last = steps[-1]
    data[int(last[1:-1]) if last.startswith("[") else last] = value


@badinput("unnamed")
@given(outers, st.data())
def test_a_refusal_names_the_path_of_the_bad_field(value: Outer, data: st.DataObject) -> None:
    raw: Any = dump(value)
    path = data.draw(st.sampled_from(_paths(raw, "top")))
    _replace(raw, path, {"not": "this"} if not path.endswith(".inner") else 7)
    with pytest.raises(ReadError) as e:
        load(Outer, raw, "top")
    assert e.value.path == path or e.value.path.startswith(path), (path, str(e.value))
    assert str(e.value).startswith(e.value.path + ": ")


@badinput("traceback")
@given(st.binary(max_size=200) | st.text(max_size=200))
def test_arbitrary_bytes_parse_or_are_refused_naming_the_source(raw: bytes | str) -> None:
    for parse in (parse_json, parse_toml):
        try:
            parse(raw, "input f")
        except ReadError as e:
            assert "input f" in str(e)


@badinput("traceback")
@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b"\xff", "not UTF-8 text"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nested too deeply"),
        ("[" * 100_000, "nested too deeply"),
        ('{"a": 1, "a": 2}', "key 'a' appears twice"),
        ('{"a": NaN}', "NaN is not a number JSON allows"),
        ("{", "is not valid JSON"),
    ],
)
def test_the_json_envelope_names_the_source_and_the_fault(raw: bytes | str, needle: str) -> None:
    with pytest.raises(ReadError, match="state file f") as e:
        parse_json(raw, "state file f")
    assert needle in str(e.value) and isinstance(e.value, InputError)


def test_the_toml_envelope() -> None:
    assert parse_toml('a = 1\n[t]\nb = "x"\n', "f") == {"a": 1, "t": {"b": "x"}}
    for raw, needle in [("a = " + "[" * 5000, "nested too deeply"), ("a = " + "1" * 5000, "too long"), ("a =", "")]:
        with pytest.raises(ReadError, match="malformed TOML in f") as e:
            parse_toml(raw, "f")
        assert needle in str(e.value)


def test_read_file(tmp_path: Path) -> None:
    assert read_file(tmp_path / "none", "f", 10) is None
    (tmp_path / "big").write_bytes(b"x" * 11)
    with pytest.raises(ReadError, match="^f: .*more than 10 bytes"):
        read_file(tmp_path / "big", "f", 10)
    with pytest.raises(ReadError, match="^f: .*directory"):
        read_file(tmp_path, "f", 10)


@badinput("unnamed")
def test_the_cursor_names_each_field() -> None:
    root = Cursor({"partitions": [{}, {}, {"raylet": {"pid": "x"}}]})
    pid = root.at("partitions").list()[2].at("raylet").at("pid")
    with pytest.raises(ReadError, match=r"^partitions\[2\]\.raylet\.pid: 'x' is not an integer$"):
        pid.int(1, 10)
    with pytest.raises(ReadError, match=r"^partitions\[0\]\.raylet: missing$"):
        root.at("partitions").list()[0].at("raylet")
    assert root.at("partitions").list()[0].at("raylet", None).optional() is None
    with pytest.raises(ReadError, match=r"^x: unknown key 'x'$"):
        Cursor({"x": 1}).only(["y"])
    with pytest.raises(ReadError, match="^a: 5 is outside 0..3$"):
        Cursor(5, "a").int(0, 3)
    with pytest.raises(ReadError, match="^a: 'b' is not one of red, blue$"):
        Cursor("b", "a").enum(Colour)
    with pytest.raises(ReadError, match="^a: my own words for 'b'$"):
        Cursor("b", "a").bool("my own words for {value}")
    with pytest.raises(ReadError, match="is not one line"):
        Cursor("a\tb").text()
    assert Cursor("a\tb").text(forbid="\n") == "a\tb"
    assert Cursor(2).number(0, 3) == 2.0 and Cursor("red").one_of(["red"]) == "red"
    with pytest.raises(ReadError, match="str is not an object"):
        Cursor("red").mapping()
