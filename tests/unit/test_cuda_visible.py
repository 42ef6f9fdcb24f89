"""Property tests of the CUDA_VISIBLE_DEVICES parser (ray_accel_cuda.visible).

The forms are CUDA's own (CUDA Programming Guide 5.2.1.1: indexes, UUIDs,
unique UUID prefixes; empty shows none) plus Ray's `NoDevFiles` and our
index ranges; bad entries are refused naming them.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray_accel_cuda.visible import parse_cuda_visible
from ray_accel_mock.spec import load_spec

from ray_accel.core.devices import Device
from ray_accel.core.visibility import VisibilityError
from tests.badinput import badinput

P4D: tuple[Device, ...] = load_spec("p4d.24xlarge").devices
SPACE = st.sampled_from(["", " ", "  "])


def _unique_prefix(uuid: str, devices: tuple[Device, ...]) -> str:
    for n in range(len("GPU-") + 1, len(uuid) + 1):
        if sum(d.id.startswith(uuid[:n]) for d in devices) == 1:
            return uuid[:n]
    return uuid


@st.composite
def masks(draw: st.DrawFn) -> tuple[str, list[int]]:
    """A mask of distinct GPUs, each named by index, UUID or unique prefix."""
    order = draw(st.permutations([d.index for d in P4D]))
    chosen = order[: draw(st.integers(1, len(order)))]
    tokens = []
    for i in chosen:
        form = draw(st.sampled_from(["index", "uuid", "prefix"]))
        uuid = P4D[i].id
        token = str(i) if form == "index" else uuid if form == "uuid" else _unique_prefix(uuid, P4D)
        tokens.append(draw(SPACE) + token + draw(SPACE))
    return ",".join(tokens), list(chosen)


@given(masks())
def test_every_form_gives_nvml_indexes_in_mask_order(case: tuple[str, list[int]]) -> None:
    value, expected = case
    assert parse_cuda_visible(value, P4D) == expected


@badinput("masks")
@given(masks(), st.data())
def test_naming_one_gpu_twice_is_refused(case: tuple[str, list[int]], data: st.DataObject) -> None:
    value, expected = case
    again = data.draw(st.sampled_from(expected))
    twin = data.draw(st.sampled_from([str(again), P4D[again].id]))
    with pytest.raises(VisibilityError, match=f"duplicate GPU {again}"):
        parse_cuda_visible(f"{value},{twin}", P4D)


@badinput("masks")
@given(st.integers(len(P4D), 65535), masks())
def test_an_index_past_the_host_is_refused_naming_it(index: int, case: tuple[str, list[int]]) -> None:
    with pytest.raises(VisibilityError, match=f"GPU {index} .*out of range"):
        parse_cuda_visible(f"{case[0]},{index}", P4D)


@badinput("masks")
@given(st.text(alphabet=st.sampled_from(list("0123456789,- GPU-abcdefMIGNoDevFiles")), max_size=30))
def test_any_text_gives_known_gpus_or_a_visibility_error(value: str) -> None:
    try:
        got = parse_cuda_visible(value, P4D)
    except VisibilityError:
        return
    assert got is not None
    assert len(got) == len(set(got)), "never a GPU twice"
    assert set(got) <= {d.index for d in P4D}


@pytest.mark.parametrize("value", ["", "  ", "NoDevFiles"])
def test_none_visible(value: str) -> None:
    assert parse_cuda_visible(value, P4D) == []


def test_unset_is_everything() -> None:
    assert parse_cuda_visible(None, P4D) is None


@badinput("masks")
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0,,1", "empty entry"),
        ("GPU-", "matches 8 GPUs"),
        ("MIG-1", "matches 0 GPUs"),
        ("-1", "bad id"),
        ("3-1", "descending"),
    ],
)
def test_bad_entries_are_named(value: str, message: str) -> None:
    with pytest.raises(VisibilityError, match=message):
        parse_cuda_visible(value, P4D)
