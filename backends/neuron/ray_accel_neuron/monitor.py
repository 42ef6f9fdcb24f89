"""`neuron-monitor`: the only source of NeuronCore utilisation.

The sysfs tree has no utilisation counter (`nc_time_in_use` is the length of
the current execution, `pe_cntrs` raw cycle counters; turning either into a
percentage is undocumented). neuron-monitor reports, per runtime process,
`neuroncore_counters.neuroncores_in_use.{<global core>}.neuroncore_utilization`
(percent over its period), `memory_used` per core, and system-wide
`neuron_hw_counters` (ECC per device: the health rule's source where sysfs
has no ECC node). Format: the Neuron docs'
`tools/neuron-sys-tools/neuron-monitor-user-guide.rst` ("The JSON output
format", "Configuration file example"); fixtures under
tests/fixtures/neuron/neuron-monitor.

Why one long-lived child instead of one run per sample: neuron-monitor
streams a report every `period` (default 5 s) and measures utilisation over
that period, so a fresh process per sample would take at least one period
(plus its start and its connection to every runtime) before it answers: a
sampler every 5 s would be blocked all the time. One child per host, owned
by the health decider's monitor (`health_monitor`), started on its first
poll, costs one process and a reader thread; polls read its latest report
without waiting, and the decider hands the report on to the exporters
(`telemetry`). It runs in its own process group and is killed (as a group)
on `close()` and at exit; if our process dies without that, its next write
to the closed pipe ends it (SIGPIPE, which `subprocess` restores in children).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO

from ray_accel.core.reader import Cursor, ReadError, kept, parse_json
from ray_accel_neuron.tools import kill_group

MAX_LINE_BYTES = 32 * 1024 * 1024
READINGS_KEY = "neuron_monitor"  # the report's key in the health monitor's host-wide readings
RESTART_AFTER_S = 60.0


class MonitorError(ValueError):
    """A report that is not neuron-monitor JSON."""


@dataclass(frozen=True, kw_only=True)
class Report:
    core_utilization: Mapping[int, float] = field(default_factory=dict)  # global core -> percent
    core_memory: Mapping[int, int] = field(default_factory=dict)  # global core -> device bytes
    pid_core_memory: Mapping[int, Mapping[int, int]] = field(default_factory=dict)  # pid -> core -> bytes
    hw_counters: Mapping[int, Mapping[str, int]] = field(default_factory=dict)  # device index -> ECC counts
    runtime_pids: tuple[int, ...] = ()
    problems: tuple[str, ...] = ()  # entries that did not fit the format, and tool-reported errors
    data: Mapping[str, object] = field(default_factory=dict)  # the report as printed, to hand on


CORE = re.compile(r"[0-9]{1,6}")  # a global NeuronCore number, as the report's keys write it
# `neuron_hw_counters.neuron_devices[]`: counts since the driver loaded.
HW_COUNTERS = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected")


def _core(node: Cursor) -> int:
    if not isinstance(node.key, str) or not CORE.fullmatch(node.key):
        node.fail(f"{node.key!r} is not a NeuronCore number")
    return int(node.key)


def _utilization(node: Cursor) -> tuple[int, float]:
    return _core(node), node.at("neuroncore_utilization").number(0, 100)


def _memory(node: Cursor) -> tuple[int, int]:
    return _core(node), sum(count.int(0) for _, count in node.items())


def _hw(row: Cursor) -> tuple[int, dict[str, int]]:
    counts = {k: row.at(k).int(0) for k in HW_COUNTERS if k in row.mapping()}
    if not counts:
        row.fail("holds no ECC count")
    return row.at("neuron_device_index").int(0), counts


def _runtime(
    rt: Cursor,
    util: dict[int, float],
    mem: dict[int, int],
    by_pid: dict[int, dict[int, int]],
    problems: list[str],
) -> int | None:
    pid = None if (at := rt.at("pid", None)).data is None else at.int(0)
    error = rt.at("error", "").data
    report = rt.at("report", {})
    in_use = report.at("neuroncore_counters", {}).at("neuroncores_in_use", {}).items()
    usage = report.at("memory_used", {}).at("neuron_runtime_used_bytes", {}).at("usage_breakdown", {})
    per_core = usage.at("neuroncore_memory_usage", {}).items()
    if isinstance(error, str) and error:
        problems.append(f"runtime {pid}: {error}")
    for _, node in in_use:
        if (read := kept(_utilization, node, problems)) is not None:
            util[read[0]] = max(util.get(read[0], 0.0), read[1])
    for _, node in per_core:
        if (counted := kept(_memory, node, problems)) is not None:
            core, total = counted
            mem[core] = mem.get(core, 0) + total
            if pid is not None:
                by_pid.setdefault(pid, {})[core] = by_pid.get(pid, {}).get(core, 0) + total
    return pid


def parse_report(text: str | bytes) -> Report:
    """One JSON record of the stream. Entries that do not fit the documented
    format are skipped and named in `problems`; only a record that is not a
    JSON object raises."""
    try:
        data = parse_json(text, "neuron-monitor", "{source} printed invalid JSON: {error}", nan=True)
    except ReadError as e:
        raise MonitorError(str(e)) from None
    return report_of(data)


def report_of(data: object) -> Report:
    """`parse_report` of a record already parsed (as the decider hands it on)."""
    if not isinstance(data, dict):
        raise MonitorError(f"neuron-monitor printed a {type(data).__name__}, not a report object")
    util: dict[int, float] = {}
    mem: dict[int, int] = {}
    by_pid: dict[int, dict[int, int]] = {}
    problems: list[str] = []
    pids = []
    top = Cursor(data)
    for rt in kept(lambda n: n.at("neuron_runtime_data", []).list(), top, problems) or ():
        if (pid := kept(lambda n: _runtime(n, util, mem, by_pid, problems), rt, problems)) is not None:
            pids.append(pid)
    hw = kept(
        lambda n: n.at("system_data", {}).at("neuron_hw_counters", {}).at("neuron_devices", []).list(), top, problems
    )
    counters = dict(filter(None, (kept(_hw, row, problems) for row in hw or ())))
    return Report(
        core_utilization=util,
        core_memory=mem,
        pid_core_memory=by_pid,
        hw_counters=counters,
        runtime_pids=tuple(pids),
        problems=tuple(problems),
        data=data,
    )


def config_json(period_s: int) -> str:
    """The documented configuration: runtime metric groups we read, ECC counters."""
    return json.dumps(
        {
            "period": f"{period_s}s",
            "neuron_runtimes": [
                {"tag_filter": ".*", "metrics": [{"type": "neuroncore_counters"}, {"type": "memory_used"}]}
            ],
            "system_metrics": [{"type": "neuron_hw_counters"}],
        }
    )


class MonitorStream:
    """One neuron-monitor child and the latest report it printed."""

    def __init__(
        self,
        path: str,
        period_s: int,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.period_s = period_s
        self._env = None if env is None else dict(env)
        self._clock = clock
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._config: str | None = None
        self._latest: tuple[Report, float] | None = None
        self._ended: str | None = None
        self._started_at = 0.0
        self._closed = False
        atexit.register(self.close)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> None:
        fd, self._config = tempfile.mkstemp(prefix="ray-accel-neuron-monitor-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            f.write(config_json(self.period_s))
        self._started_at = self._clock() or 1e-9  # 0.0 means "never started"
        self._ended = None
        try:
            proc = subprocess.Popen(
                [self.path, "-c", self._config],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=self._env,
                start_new_session=True,
            )
        except OSError as e:
            self._ended = f"cannot run {self.path}: {e.strerror or e}"
            return
        self._proc = proc
        assert proc.stdout is not None
        threading.Thread(target=self._read, args=(proc, proc.stdout), daemon=True, name="neuron-monitor").start()

    def _read(self, proc: subprocess.Popen[bytes], out: IO[bytes]) -> None:
        skipping = False
        while True:
            line = out.readline(MAX_LINE_BYTES + 1)
            if not line:
                break
            if skipping or (len(line) > MAX_LINE_BYTES and not line.endswith(b"\n")):
                skipping = not line.endswith(b"\n")
                continue
            if not line.strip():
                continue
            try:
                report = parse_report(line)
            except MonitorError:
                continue
            with self._lock:
                if proc is self._proc:
                    self._latest = (report, self._clock())
        code = proc.wait()
        with self._lock:
            if proc is self._proc:
                self._ended = f"{self.path} exited with {code}"

    def latest(self) -> tuple[Report | None, str | None]:
        """The newest report not older than three periods, or why there is none."""
        with self._lock:
            if self._closed:
                return None, "neuron-monitor stopped"
            now = self._clock()
            never = self._started_at == 0.0 and self._proc is None and self._ended is None
            if never or (self._ended and now - self._started_at >= RESTART_AFTER_S):
                self._stop_child()
                self._start()
            latest, ended = self._latest, self._ended
        if latest is not None and now - latest[1] <= 3 * self.period_s + 1:
            return latest[0], None
        if ended:
            return None, ended
        if latest is None:
            return None, f"waiting for the first report of {self.path}"
        return None, f"the last report of {self.path} is {now - latest[1]:.0f}s old"

    def _stop_child(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                kill_group(proc.pid)
            proc.wait()  # the reader thread then sees end of file and stops
        if self._config is not None:
            try:
                os.unlink(self._config)
            except OSError:
                pass
            self._config = None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._stop_child()
        atexit.unregister(self.close)
