"""`--json` output (`cli.output.json_text`): the JSON `reader.dump` makes of
a payload, written by json's C encoder a line per top-level key and list item."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ray_accel.cli.output import json_text
from ray_accel.cluster.status import cluster_view
from ray_accel.core.reader import LOCAL, dump
from tests.status_nodes import NODES


class Color(enum.Enum):
    RED = "red"
    BLUE = 2


class Mode(enum.StrEnum):
    FAST = "fast"


@dataclass(frozen=True)
class Inner:
    name: str
    color: Color
    kept: str | None = field(default=None, metadata=LOCAL)


@dataclass(frozen=True)
class Outer:
    items: tuple[Inner, ...]
    mode: Mode
    extra: dict[str, Any]


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.sampled_from([Color.RED, Color.BLUE, Mode.FAST]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=6), inner, max_size=4),
        st.builds(Inner, st.text(max_size=6), st.sampled_from(list(Color)), st.text(max_size=3)),
        st.builds(
            Outer,
            st.lists(st.builds(Inner, st.text(max_size=6), st.sampled_from(list(Color))), max_size=3).map(tuple),
            st.just(Mode.FAST),
            st.dictionaries(st.text(max_size=6), inner, max_size=3),
        ),
    ),
    max_leaves=20,
)


@given(values)
def test_json_text_reads_back_as_dump_writes_it(value: object) -> None:
    assert json.loads(json_text(value)) == dump(value)


def test_a_local_field_is_left_out() -> None:
    assert json.loads(json_text(Inner("a", Color.RED, kept="secret"))) == {"name": "a", "color": "red"}
    assert "secret" not in json_text(Outer((Inner("a", Color.BLUE, kept="secret"),), Mode.FAST, {}))


def test_a_view_has_a_line_per_key_and_per_item() -> None:
    view = cluster_view("10.0.0.1:6379", NODES)
    text = json_text(view)
    assert json.loads(text) == dump(view)
    lines = text.splitlines()
    assert lines[0] == "{" and lines[-1] == "}"
    assert lines[1] == '  "gcs_address": "10.0.0.1:6379",'
    # Each partition on a line of its own, whole.
    items = [json.loads(line.strip().rstrip(",")) for line in lines if line.startswith("    {")]
    shown = [item for item in items if "node_id" in item]
    assert [p["node_id"] for p in shown] == [p.node_id for p in view.partitions]


def test_a_value_json_cannot_write_is_an_error_naming_it() -> None:
    try:
        json_text({"x": object()})
    except TypeError as e:
        assert "object is not JSON-able" in str(e)
    else:
        raise AssertionError("an object was written as JSON")
