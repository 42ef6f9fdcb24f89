"""The mock's telemetry: deterministic device samples, and the processes that
hold devices as the masks workers publish (`ray_accel.core.masks`) say,
standing for what a vendor tool reports per process.

The mock alone reads published masks, and it checks their writers itself:
each through a pidfd, verified once against the record's start time when
first seen; after that one `poll` of every pidfd per call says which ended
(a pidfd reads ready once its process has exited, as a zombie too), so a
check reads nothing per record and a collection costs about what it would
on a backend whose vendor tool names the holders.
"""

from __future__ import annotations

import errno
import os
import select
import weakref
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from ray_accel.core import masks
from ray_accel.core.devices import Device
from ray_accel.core.processes import current
from ray_accel.core.samples import DeviceSample
from ray_accel.core.visibility import parse_visible_ids
from ray_accel.plugins.interface import Telemetry
from ray_accel_mock.faults import FAULTS_ENV, Faults, load_faults
from ray_accel_mock.health import marked_unhealthy
from ray_accel_mock.spec import HostSpec

PROCESS_MEMORY_PER_CORE = 64 * 1024**2
# Distinct masks remembered (each a few bytes): far more than a host's workers publish.
MASK_CACHE_SIZE = 4096


@dataclass(frozen=True)
class _Holdings:
    """The records whose masks name any of this host's cores, as the mock's
    holdings: per PID its recorded start time and device memory, and per
    device its PIDs (sorted). Liveness is not in it: it is checked on every call."""

    starts: dict[int, int]
    memory: dict[int, dict[str, int]]
    holders: dict[str, tuple[int, ...]]

    @classmethod
    def of(cls, records: Mapping[int, tuple[str, int]], memory_of: Callable[[str], dict[str, int]]) -> _Holdings:
        starts: dict[int, int] = {}
        memory: dict[int, dict[str, int]] = {}
        holders: dict[str, list[int]] = {}
        for pid, (mask, start) in sorted(records.items()):
            held = memory_of(mask)
            if held:
                starts[pid], memory[pid] = start, held
                for device in held:
                    holders.setdefault(device, []).append(pid)
        return cls(starts, memory, {d: tuple(p) for d, p in sorted(holders.items())})


# pidfd_open(2) of a PID that names no process: ESRCH, none has it; ENOENT
# (Linux 6.9 and later; EINVAL before), a thread of another process has it,
# the writer having ended and its number been reused (seen on 6.18, once PIDs wrapped).
NO_PROCESS = (errno.ESRCH, errno.ENOENT, errno.EINVAL)


def _watch(pid: int, start_ticks: int) -> int:
    """A pidfd of the process that started at `start_ticks` as `pid`, or -1
    if it ended (or the PID was reused). Opened before the check: a process
    that passes it is the one the pidfd names."""
    try:
        fd = os.pidfd_open(pid)
    except OSError as e:
        if e.errno in NO_PROCESS:
            return -1
        raise
    if current(pid, start_ticks) is None:
        os.close(fd)
        return -1
    return fd


def _close_all(fds: dict[tuple[int, int], int]) -> None:
    for fd in fds.values():
        if fd >= 0:
            os.close(fd)
    fds.clear()


class _Writers:
    """Which record writers (PID, start ticks) still live."""

    def __init__(self) -> None:
        self._fds: dict[tuple[int, int], int] = {}  # -1: ended
        self._keys: dict[int, tuple[int, int]] = {}
        self._poll = select.poll()
        # The last answer, and what it was for: asked again for the same
        # holdings, only a writer that ended since changes it.
        self._answer: tuple[Mapping[int, int], set[int]] | None = None
        weakref.finalize(self, _close_all, self._fds)

    def alive(self, starts: Mapping[int, int]) -> set[int]:
        """The PIDs of `starts` (PID -> start ticks) whose writer lives (read only)."""
        fds = self._fds
        if self._answer is None or self._answer[0] is not starts:
            for key in starts.items():
                if key not in fds:
                    fd = fds[key] = _watch(*key)
                    if fd >= 0:
                        self._keys[fd] = key
                        self._poll.register(fd, select.POLLIN)
            self._answer = None
        for fd, _ in self._poll.poll(0):
            self._close(fd)
            self._answer = None
        if self._answer is None:
            self._answer = (starts, {pid for pid, start in starts.items() if fds[pid, start] >= 0})
        return self._answer[1]

    def keep(self, starts: Mapping[int, int]) -> None:
        """Forget every writer not in `starts` (its record is gone)."""
        for key in [k for k in self._fds if starts.get(k[0]) != k[1]]:
            if (fd := self._fds.pop(key)) >= 0:
                self._close(fd)

    def _close(self, fd: int) -> None:
        self._poll.unregister(fd)
        os.close(fd)
        key = self._keys.pop(fd)
        if key in self._fds:
            self._fds[key] = -1


def _sample(d: Device) -> DeviceSample:
    """The device's sample while the fault file adds no event: the spec's mark is one standing event."""
    i = d.index
    return DeviceSample(
        device_id=d.id,
        utilization=((i * 37) % 100) / 100,
        memory_used_bytes=d.memory_bytes * ((i * 13) % 60) // 100,
        memory_total_bytes=d.memory_bytes,
        power_watts=100.0 + 10 * i,
        temperature_c=40.0 + i,
        recent_events=int(marked_unhealthy(d)),
    )


class MockTelemetry(Telemetry):
    """Deterministic samples, so tests can predict every value; faults can be
    injected while running."""

    def __init__(self, spec: HostSpec) -> None:
        self.spec = spec
        self._device_of = {c: d.id for d in spec.devices for c in d.core_ids}
        self._mask_cache: dict[str, dict[str, int]] = {}
        self._published = masks.PublishedMasks()
        self._holdings_of: tuple[object, _Holdings] | None = None
        self._writers = _Writers()
        # Fixed functions of the spec (made once): tests can predict every value.
        self._samples = [_sample(d) for d in spec.devices]
        self._ids = [d.id for d in spec.devices]

    def _faults(self) -> Faults:
        """Faults injected while running (`ray_accel_mock.faults`: the
        RAYACCEL_MOCK_FAULTS file, re-read on every sample); a file that does
        not fit is a `FaultFileError` naming what, and the samples fail with it."""
        return load_faults(os.environ.get(FAULTS_ENV), self._ids, self.spec.family)

    def device_samples(self) -> list[DeviceSample]:
        faults = self._faults()
        if faults.fail:
            raise RuntimeError("mock metrics source failed (injected)")
        events: Counter[str] = Counter()
        for e in faults.events:
            events[e.device] += e.count
        return [
            s._replace(recent_events=(s.recent_events or 0) + events[s.device_id]) if s.device_id in events else s
            for s in self._samples
            if s.device_id not in faults.lost
        ]

    def _memory_of(self, mask: str) -> dict[str, int]:
        """Device id -> 64 MiB per core of it that `mask` names ({} for a mask
        that names none of this host's cores, or cannot be parsed). Cached:
        workers publish few distinct masks."""
        held = self._mask_cache.get(mask)
        if held is None:
            cores: dict[str, int] = {}
            try:
                ids = parse_visible_ids(mask) or []
            except ValueError:
                ids = []
            for core in ids:
                device = self._device_of.get(core)
                if device is not None:
                    cores[device] = cores.get(device, 0) + 1
            held = {d: n * PROCESS_MEMORY_PER_CORE for d, n in cores.items()}
            if len(self._mask_cache) >= MASK_CACHE_SIZE:
                self._mask_cache.clear()
            self._mask_cache[mask] = held
        return held

    def _live(self) -> tuple[_Holdings, set[int]]:
        """What the current records hold (worked out again only when they were
        read again: the directory changed), and which of their writers live."""
        records = self._published.records()
        if self._holdings_of is None or self._holdings_of[0] is not records:
            self._holdings_of = (records, _Holdings.of(records, self._memory_of))
            self._writers.keep(self._holdings_of[1].starts)
        h = self._holdings_of[1]
        return h, self._writers.alive(h.starts)

    def process_device_memory(self, pids: Collection[int]) -> Mapping[int, Mapping[str, int]]:
        """64 MiB per core each live process's current mask names (as the
        bridge published it): deterministic, and only on processes that hold
        cores. Processes with the same mask share one (read-only) mapping."""
        h, live = self._live()
        return {pid: h.memory[pid] for pid in pids if pid in live}

    def device_holders(self) -> dict[str, tuple[int, ...]]:
        """Every live process whose published mask names one of a device's
        cores holds that device, Ray worker or not. It stands for what the
        vendor tools report: `neuron-ls --json-output` lists the processes
        using each device (`neuron_processes`), NVML the compute processes of
        each GPU (nvmlDeviceGetComputeRunningProcesses)."""
        h, live = self._live()
        if len(live) == len(h.starts):  # every writer is alive: all of them hold
            return dict(h.holders)
        return {d: kept for d, pids in h.holders.items() if (kept := tuple(p for p in pids if p in live))}
