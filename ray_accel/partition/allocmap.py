"""Per-agent allocation of cores (Neuron) or devices (GPU).

The state is a frozen value and every operation a pure function returning a
new state, so a failed allocation cannot change anything and freeing returns
exactly the prior state. `AllocMap` is the thin, locked holder an agent keeps.

Discrete requests take whole units and prefer a free, contiguous group aligned
to its size (a 4-core Neuron job wants cores 4k..4k+3), choosing among aligned
candidates the one inside the fullest enclosing block, so large aligned blocks
stay free under churn (buddy-allocator best fit). Fractional requests (GPUs
only) take a share of one unit, in multiples of a quantum, either filling the
fullest unit that fits or spreading to the emptiest.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Literal

from ray_accel.core.devices import SHAREABLE_FAMILIES, Device
from ray_accel.core.errors import InputError, RayAccelError

ONE = Decimal(1)
ZERO = Decimal(0)
Strategy = Literal["fill", "evenly"]


class AllocationError(RayAccelError):
    """Not enough free capacity; nothing was changed."""


class MaskError(InputError):
    """A request names a unit outside this agent's mask."""


@dataclass(frozen=True)
class Allocation:
    workload_id: str
    shares: tuple[tuple[int, Decimal], ...]  # (unit id, share of that unit)
    aligned: bool = True

    @property
    def units(self) -> tuple[int, ...]:
        return tuple(u for u, _ in self.shares)

    @property
    def amount(self) -> Decimal:
        return sum((s for _, s in self.shares), ZERO)


@dataclass(frozen=True)
class AllocState:
    units: tuple[int, ...]  # the agent's mask, sorted
    fractional: bool = False
    quantum: Decimal = Decimal("0.01")
    used: Mapping[int, Decimal] = field(default_factory=dict)
    workloads: Mapping[str, Allocation] = field(default_factory=dict)

    def free_share(self, unit: int) -> Decimal:
        return ONE - self.used.get(unit, ZERO)

    def free_units(self) -> list[int]:
        return [u for u in self.units if self.used.get(u, ZERO) == ZERO]

    def total_used(self) -> Decimal:
        return sum(self.used.values(), ZERO)


def new_state(units: Iterable[int], fractional: bool = False, quantum: Decimal | str = "0.01") -> AllocState:
    q = Decimal(str(quantum))
    if q <= 0 or q > 1 or ONE % q != 0:
        raise InputError(f"quantum {quantum} must divide 1")
    ordered = tuple(sorted(set(units)))
    return AllocState(units=ordered, fractional=fractional, quantum=q)


def _amount(value: int | float | str | Decimal) -> Decimal:
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        raise InputError(f"bad amount {value!r}") from None
    if not amount.is_finite() or amount <= 0:
        raise InputError(f"amount must be positive, got {value}")
    return amount


def _aligned_candidates(state: AllocState, free: set[int], n: int) -> list[tuple[int, ...]]:
    out = []
    for start in state.units:
        if start % n == 0 and all(u in free for u in range(start, start + n)):
            out.append(tuple(range(start, start + n)))
    return out


def _crowding(prefix: list[int], block: tuple[int, ...]) -> tuple[int, ...]:
    """Free units in each enclosing aligned block, smallest enclosing first.

    `prefix[i]` is the number of free units below i, so each count is O(1).
    """
    top = len(prefix) - 1
    out = []
    size = len(block) * 2
    while size <= 2 * top:
        base = block[0] - block[0] % size
        out.append(prefix[min(base + size, top)] - prefix[min(base, top)])
        size *= 2
    return tuple(out)


def _pick_discrete(state: AllocState, n: int) -> tuple[tuple[int, ...], bool]:
    free_list = state.free_units()
    free = set(free_list)
    candidates = _aligned_candidates(state, free, n)
    if candidates:
        prefix = [0]
        for u in range(state.units[-1] + 1):
            prefix.append(prefix[-1] + (u in free))
        return min(candidates, key=lambda b: (_crowding(prefix, b), b[0])), True
    for i in range(len(free_list) - n + 1):
        run = free_list[i : i + n]
        if run[-1] - run[0] == n - 1:
            return tuple(run), False
    return tuple(free_list[:n]), False


def allocate(
    state: AllocState,
    workload_id: str,
    amount: int | float | str | Decimal = 1,
    units: Sequence[int] | None = None,
    strategy: Strategy = "fill",
) -> tuple[AllocState, Allocation]:
    """Grant `amount` to `workload_id`; raise without changing anything if not possible."""
    if workload_id in state.workloads:
        raise InputError(f"workload {workload_id!r} already holds an allocation")
    if units is not None:
        outside = [u for u in units if u not in state.units]
        if outside:
            raise MaskError(f"unit(s) {outside} are outside this agent's mask {list(state.units)}")
        if len(set(units)) != len(units):
            raise InputError(f"duplicate units in {list(units)}")
        busy = [u for u in units if state.used.get(u, ZERO) > 0]
        if busy:
            raise AllocationError(f"unit(s) {busy} are in use")
        alloc = Allocation(workload_id, tuple((u, ONE) for u in sorted(units)), aligned=False)
        return _apply(state, alloc), alloc
    amt = _amount(amount)
    if amt < 1:
        if not state.fractional:
            raise InputError(f"fractional amount {amt} on a family that cannot share a device")
        if amt % state.quantum:
            raise InputError(f"amount {amt} is not a multiple of the quantum {state.quantum}")
        fits = [u for u in state.units if state.free_share(u) >= amt]
        if not fits:
            raise AllocationError(f"no unit has {amt} free")
        if strategy == "fill":
            unit = min(fits, key=lambda u: (state.free_share(u), u))
        elif strategy == "evenly":
            unit = min(fits, key=lambda u: (-state.free_share(u), u))
        else:
            raise InputError(f"unknown strategy {strategy!r}: use fill or evenly")
        alloc = Allocation(workload_id, ((unit, amt),))
        return _apply(state, alloc), alloc
    if amt != amt.to_integral_value():
        raise InputError(f"amount {amt} above 1 must be a whole number")
    n = int(amt)
    free = state.free_units()
    if n > len(free):
        raise AllocationError(f"asked for {n}, {len(free)} free of {len(state.units)}")
    block, aligned = _pick_discrete(state, n)
    alloc = Allocation(workload_id, tuple((u, ONE) for u in block), aligned=aligned)
    return _apply(state, alloc), alloc


def _apply(state: AllocState, alloc: Allocation) -> AllocState:
    used = dict(state.used)
    for u, share in alloc.shares:
        used[u] = used.get(u, ZERO) + share
        if used[u] > ONE:
            raise AllocationError(f"unit {u} would be over-committed ({used[u]})")
    return replace(state, used=used, workloads={**state.workloads, alloc.workload_id: alloc})


def release(state: AllocState, workload_id: str) -> AllocState:
    alloc = state.workloads.get(workload_id)
    if alloc is None:
        raise InputError(f"workload {workload_id!r} holds no allocation")
    used = dict(state.used)
    for u, share in alloc.shares:
        used[u] -= share
        if used[u] == ZERO:
            del used[u]
    workloads = {k: v for k, v in state.workloads.items() if k != workload_id}
    return replace(state, used=used, workloads=workloads)


def rebuild(state: AllocState, live: Iterable[Allocation]) -> AllocState:
    """The state holding exactly `live`, as after an agent restart."""
    fresh = replace(state, used={}, workloads={})
    for alloc in live:
        outside = [u for u in alloc.units if u not in fresh.units]
        if outside:
            raise MaskError(f"live workload {alloc.workload_id!r} holds unit(s) {outside} outside the mask")
        if alloc.workload_id in fresh.workloads:
            raise InputError(f"live workload {alloc.workload_id!r} listed twice")
        fresh = _apply(fresh, alloc)
    return fresh


class AllocMap:
    """The mutable, thread-safe face of an `AllocState`, one per agent."""

    def __init__(self, state: AllocState) -> None:
        self._state = state
        self._lock = threading.Lock()

    @classmethod
    def for_devices(cls, devices: Sequence[Device], quantum: Decimal | str = "0.01") -> AllocMap:
        fractional = bool(devices) and devices[0].family in SHAREABLE_FAMILIES
        return cls(new_state((c for d in devices for c in d.core_ids), fractional, quantum))

    @property
    def state(self) -> AllocState:
        return self._state

    def allocate(
        self,
        workload_id: str,
        amount: int | float | str | Decimal = 1,
        units: Sequence[int] | None = None,
        strategy: Strategy = "fill",
    ) -> Allocation:
        with self._lock:
            self._state, alloc = allocate(self._state, workload_id, amount, units, strategy)
            return alloc

    def free(self, workload_id: str) -> None:
        with self._lock:
            self._state = release(self._state, workload_id)

    def rebuild(self, live: Iterable[Allocation]) -> None:
        with self._lock:
            self._state = rebuild(self._state, live)
