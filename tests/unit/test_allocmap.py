"""Alloc-map properties (after Backend.AI's tests): no example tables."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray_accel_mock.spec import load_spec

from ray_accel.core.errors import InputError
from ray_accel.partition.allocmap import (
    AllocationError,
    AllocMap,
    MaskError,
    allocate,
    new_state,
    rebuild,
    release,
)

masks = st.sets(st.integers(0, 63), min_size=1, max_size=32)
ops = st.lists(
    st.tuples(st.sampled_from(["alloc", "free"]), st.sampled_from([1, 2, 4, 8]), st.integers(0, 1000)), max_size=40
)


@given(masks, ops)
def test_discrete_churn_invariants(mask: set[int], trace: list[tuple[str, int, int]]) -> None:
    state = new_state(mask)
    history = [state]
    for n, (op, amount, pick) in enumerate(trace):
        if op == "alloc":
            try:
                after, alloc = allocate(state, f"w{n}", amount)
            except AllocationError:
                continue
            assert set(alloc.units) <= mask, "mask crossed"
            assert len(alloc.units) == amount
            if alloc.aligned:
                assert alloc.units[0] % amount == 0
                assert list(alloc.units) == list(range(alloc.units[0], alloc.units[0] + amount))
            assert release(after, f"w{n}") == state, "allocate then free must restore the exact state"
            state = after
        elif state.workloads:
            victim = sorted(state.workloads)[pick % len(state.workloads)]
            state = release(state, victim)
        held = [u for a in state.workloads.values() for u in a.units]
        assert len(held) == len(set(held)), "two workloads share a unit"
        assert all(v <= 1 for v in state.used.values())
        assert rebuild(state, state.workloads.values()) == state
        history.append(state)
    for w in list(state.workloads):
        state = release(state, w)
    assert state.total_used() == 0 and state == history[0]


@given(masks, st.integers(1, 70))
def test_failed_allocation_changes_nothing(mask: set[int], amount: int) -> None:
    m = AllocMap(new_state(mask))
    m.allocate("first", 1)
    before = m.state
    if amount > len(mask) - 1:
        with pytest.raises(AllocationError):
            m.allocate("second", amount)
        assert m.state is before
    else:
        alloc = m.allocate("second", amount)
        assert len(alloc.units) == amount and set(alloc.units) <= mask
        m.free("second")
        assert m.state == before, "a grant that fits, then freed, restores the exact prior state"


@given(masks, st.sets(st.integers(0, 80), min_size=1, max_size=4))
def test_explicit_units_outside_mask_are_refused(mask: set[int], wanted: set[int]) -> None:
    state = new_state(mask)
    if wanted <= mask:
        _after, alloc = allocate(state, "w", units=sorted(wanted))
        assert set(alloc.units) == wanted
    else:
        with pytest.raises(MaskError, match="outside this agent's mask"):
            allocate(state, "w", units=sorted(wanted))


fractions = st.lists(st.sampled_from(["0.25", "0.5", "0.1", "0.3", "1", "2"]), max_size=30)


@given(st.integers(1, 8), fractions, st.sampled_from(["fill", "evenly"]))
def test_fractional_never_overcommits(gpus: int, amounts: list[str], strategy: str) -> None:
    state = new_state(range(gpus), fractional=True)
    start = state
    for n, a in enumerate(amounts):
        try:
            state, alloc = allocate(state, f"w{n}", a, strategy=strategy)  # type: ignore[arg-type]
        except AllocationError:
            continue
        assert alloc.amount == Decimal(a)
        assert all(v <= 1 for v in state.used.values())
    for w in list(state.workloads):
        state = release(state, w)
    assert state == start


def test_fill_packs_and_evenly_spreads() -> None:
    s = new_state(range(4), fractional=True)
    s, a = allocate(s, "a", "0.5", strategy="fill")
    s, b = allocate(s, "b", "0.25", strategy="fill")
    assert a.units == b.units == (0,)
    s, c = allocate(s, "c", "0.25", strategy="evenly")
    assert c.units == (1,)


def test_fractional_rules() -> None:
    neuron = AllocMap.for_devices(load_spec("trn1.32xlarge").devices)
    with pytest.raises(InputError, match="fractional amount 0.5"):
        neuron.allocate("w", 0.5)
    gpu = AllocMap.for_devices(load_spec("p4d.24xlarge").devices, quantum="0.25")
    with pytest.raises(InputError, match="not a multiple of the quantum"):
        gpu.allocate("w", "0.3")
    with pytest.raises(InputError, match="whole number"):
        gpu.allocate("w", "1.5")


def test_discrete_prefers_aligned_groups_that_keep_big_blocks_free() -> None:
    s = new_state(range(16))
    s, _ = allocate(s, "a", 1)  # core 0
    s, b = allocate(s, "b", 2)
    assert b.units == (2, 3), "fills the partly used 4-block, not a fresh one"
    s, c = allocate(s, "c", 8)
    assert c.units == tuple(range(8, 16))


def test_rebuild_rejects_overlap_and_mask_violations() -> None:
    s = new_state(range(4))
    s1, a = allocate(s, "a", 2)
    with pytest.raises(AllocationError):
        rebuild(s, [a, a.__class__("b", a.shares)])
    with pytest.raises(MaskError):
        rebuild(new_state([8, 9]), [a])
    assert rebuild(s, [a]) == s1
