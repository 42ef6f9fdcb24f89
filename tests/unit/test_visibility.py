from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_accel.core.visibility import (
    MAX_VISIBLE_ID,
    VisibilityError,
    format_mask,
    format_visible_ids,
    mask_order,
    parse_visible_ids,
)
from tests.badinput import badinput


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", []),
        ("  ", []),
        ("0-3,8", [0, 1, 2, 3, 8]),
        ("5", [5]),
        ("3,1,2", [3, 1, 2]),
        (" 1 , 2 ", [1, 2]),
    ],
)
def test_parse_examples(value: str | None, expected: list[int] | None) -> None:
    assert parse_visible_ids(value) == expected


@badinput("masks")
@pytest.mark.parametrize(
    ("value", "token"),
    [
        ("3-1", "3-1"),
        ("a", "a"),
        ("1,,2", "empty"),
        ("1,1", "duplicate id 1"),
        ("0-3,2", "duplicate id 2"),
        ("-1", "''"),
        ("1.5", "1.5"),
    ],
)
def test_parse_errors_name_the_token(value: str, token: str) -> None:
    with pytest.raises(VisibilityError, match=token if token != "''" else None) as info:
        parse_visible_ids(value)
    assert value in str(info.value)
    assert isinstance(info.value, ValueError)


@badinput("masks")
def test_out_of_range_with_total() -> None:
    assert parse_visible_ids("0-3", total=4) == [0, 1, 2, 3]
    with pytest.raises(VisibilityError, match="id 4 .*out of range"):
        parse_visible_ids("2-4", total=4)


@badinput("unnamed")
def test_huge_range_rejected_before_expansion() -> None:
    with pytest.raises(VisibilityError, match="above"):
        parse_visible_ids(f"0-{MAX_VISIBLE_ID + 1}")


def test_format_styles() -> None:
    assert format_visible_ids([8, 0, 1, 2, 3]) == "0,1,2,3,8"
    assert format_visible_ids([8, 0, 1, 2, 3], "ranges") == "0-3,8"
    assert format_visible_ids([], "ranges") == ""
    with pytest.raises(VisibilityError, match="duplicate id 2"):
        format_visible_ids([2, 2])
    with pytest.raises(VisibilityError, match="bad id -1"):
        format_visible_ids([-1])
    with pytest.raises(VisibilityError, match="unknown style 'runs'"):
        format_visible_ids([1], "runs")  # type: ignore[arg-type]
    assert format_visible_ids([5, 7, 6, 9, 0], "ranges") == "0,5-7,9"


def test_a_mask_of_tokens_sorts_indexes_by_number_and_keeps_opaque_ids_in_order() -> None:
    assert format_mask(["10", "2", " 3"]) == "2,3,10"
    assert format_mask(["GPU-b", "GPU-a"]) == "GPU-b,GPU-a"
    assert sorted(["GPU-a", "10", "2"], key=mask_order) == ["2", "10", "GPU-a"]


id_sets = st.sets(st.integers(0, 4096), max_size=64)


@given(id_sets, st.sampled_from(["list", "ranges"]))
def test_format_then_parse_roundtrip(ids: set[int], style: str) -> None:
    text = format_visible_ids(ids, style)  # type: ignore[arg-type]
    parsed = parse_visible_ids(text)
    assert parsed is not None
    assert parsed == sorted(ids)


@given(id_sets)
def test_ranges_is_never_longer_than_list(ids: set[int]) -> None:
    assert len(format_visible_ids(ids, "ranges")) <= len(format_visible_ids(ids, "list"))


@badinput("masks")
@given(st.text(alphabet="0123456789,- a\n\t", max_size=30) | st.text(max_size=30))
def test_arbitrary_strings_parse_or_raise_visibility_error(text: str) -> None:
    try:
        result = parse_visible_ids(text)
    except VisibilityError:
        return
    assert result is not None
    assert len(result) == len(set(result))
    assert all(0 <= i <= MAX_VISIBLE_ID for i in result)


@given(id_sets, st.integers(1, 5000))
def test_total_bounds_every_id(ids: set[int], total: int) -> None:
    text = format_visible_ids(ids)
    if all(i < total for i in ids):
        assert parse_visible_ids(text, total=total) == sorted(ids)
    else:
        with pytest.raises(VisibilityError, match="out of range"):
            parse_visible_ids(text, total=total)
