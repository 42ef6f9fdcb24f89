"""What the benchmarks share: medians, a way out on Ctrl-C and SIGTERM that
stops what they started, and a `ray-accel start`/`stop` pair run through the CLI.

Every benchmark's `main` runs under `run_main`: SIGTERM and SIGHUP raise
`KeyboardInterrupt` in the main thread (as SIGINT does), so the same `finally`
blocks run whichever signal ends it, and it exits 130 saying so. Cleanup runs
`shielded`: a second Ctrl-C while a cluster is being stopped would otherwise
leave it half-stopped.

`CliCluster` starts a cluster with `ray-accel start` and stops it with
`ray-accel stop` (which stops exactly the processes `start` recorded, by PID),
both in sessions of their own so a terminal's Ctrl-C reaches only the
benchmark, which then decides: an interrupted `start` gets SIGINT (it stops
whatever it began), then `stop` runs. The state directory is removed only
after `stop` has succeeded; otherwise it is kept and named, so `ray-accel
stop` can still find the processes.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import psutil

BIN = Path(sys.executable).parent
RAY_ACCEL = str(BIN / "ray-accel")
T = TypeVar("T")


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, handled exactly as Ctrl-C."""


class StartFailed(RuntimeError):
    """A cluster start that failed at run time and has stopped what it began
    (Ray's own start can time out on a small, busy machine): the caller
    counts it and may start again."""


def say(message: str) -> None:
    """A progress line on stderr (tables go to stdout)."""
    print(f"[{Path(sys.argv[0]).stem}] {message}", file=sys.stderr, flush=True)


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signal.Signals(signum).name)


def sigterm_as_interrupt() -> None:
    """SIGTERM and SIGHUP raise `Terminated` in the main thread from now on.
    Call again after anything that sets its own handler (`ray.init` makes
    SIGTERM a plain `sys.exit`)."""
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _raise_terminated)


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM and SIGHUP raise `Terminated` in the main thread while inside."""
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    sigterm_as_interrupt()
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def shielded() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP are held while inside (cleanup must finish),
    then acted on: the first one raises on leaving, as it would have."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        held.append(signum)

    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, hold) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if held:
        raise KeyboardInterrupt() if held[0] == signal.SIGINT else Terminated(signal.Signals(held[0]).name)


def run_main(main: Callable[[], None]) -> None:
    """Run a benchmark's main; Ctrl-C, SIGTERM and SIGHUP end it with exit 130
    once its `finally` blocks have stopped what it started."""
    try:
        with interruptible():
            main()
    except KeyboardInterrupt as e:
        what = str(e) or "SIGINT"
        say(f"interrupted ({what}): stopped what this run started")
        sys.exit(130)


def median_of(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def timed(fn: Callable[[], T], runs: int, clock: Callable[[], float] = time.perf_counter) -> tuple[float, T]:
    """(median seconds of `runs` calls, the last result), after one untimed
    call (imports, caches); each call starts after a garbage collection, so
    one call's garbage is not collected inside the next one's time."""
    result = fn()
    samples = []
    for _ in range(runs):
        gc.collect()
        start = clock()
        result = fn()
        samples.append(clock() - start)
    return median_of(samples), result


def stop_popen(proc: subprocess.Popen[Any], first: int = signal.SIGTERM, grace_s: float = 30) -> None:
    """Stop a child we started, by its PID: `first`, then SIGKILL after `grace_s`."""
    if proc.poll() is None:
        proc.send_signal(first)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stop_ray_starts(procs: Sequence[subprocess.Popen[Any]], address: str = "") -> None:
    """Stop the blocking `ray start` commands (each stops what it started on
    SIGTERM), then anything they started that outlived them, by PID.
    `address`: the head's, whose current-cluster file `ray start --head`
    leaves behind (a later plain `ray.init()` would try to join the stopped
    cluster): removed if it still names that address."""
    started: list[psutil.Process] = []
    for p in procs:
        try:
            started += psutil.Process(p.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            pass
    for p in reversed(procs):  # the head last
        stop_popen(p, signal.SIGTERM)
    for child in started:
        try:
            if child.is_running():  # same PID and start time
                child.kill()
        except psutil.NoSuchProcess:
            pass
    if address:
        from ray._common.utils import get_ray_address_file

        address_file = Path(get_ray_address_file(None))
        if address_file.exists() and address_file.read_text().strip() == address:
            address_file.unlink()


class CliCluster:
    """A cluster made by `ray-accel start` in a state directory of its own,
    stopped by `ray-accel stop` on leaving the `with` block, however it is left."""

    def __init__(self, preset: str, partitions: int, start_args: Sequence[str] = ()) -> None:
        self.state = tempfile.mkdtemp(prefix="bench-state-")
        self.env = {**os.environ, "RAYACCEL_MOCK": preset, "RAYACCEL_STATE_DIR": self.state}
        self.partitions = partitions
        self.start_args = list(start_args)
        self.status: dict[str, Any] = {}
        self.start_s = 0.0
        self.attempts = 0

    def __enter__(self) -> CliCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def cli(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
        """A `ray-accel` command against this cluster, in a session of its own."""
        proc = subprocess.Popen(
            [RAY_ACCEL, *args],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except BaseException:
            with shielded():
                # SIGINT is what `ray-accel start` undoes itself on; the others stop on it too.
                stop_popen(proc, signal.SIGINT, grace_s=120)
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def start(self, attempts: int = 1) -> float:
        """Seconds `ray-accel start --head` took until every partition was
        registered. A run-time failure (exit 1, after which `start` has
        stopped everything it began) is tried again, saying so, up to
        `attempts` starts in all, then raised as `StartFailed`; bad input
        (exit 2) ends the benchmark."""
        args = ["start", "--head", "--partitions", str(self.partitions), "--json"]
        options, sep, ray_args = self._split(self.start_args)
        for attempt in range(1, attempts + 1):
            self.attempts = attempt
            began = time.perf_counter()
            proc = self.cli(*args, "--port", str(_free_port()), *options, *([sep, *ray_args] if sep else []))
            self.start_s = time.perf_counter() - began
            if proc.returncode == 0:
                self.status = json.loads(proc.stdout)
                return self.start_s
            if proc.returncode != 1:  # bad input: the benchmark's own mistake
                raise SystemExit(f"ray-accel start refused ({proc.returncode}):\n{proc.stderr[-6000:]}")
            last = (proc.stderr.strip().splitlines() or ["(no message)"])[-1][:1000]
            if attempt == attempts:
                raise StartFailed(f"ray-accel start failed: {last}")
            say(f"ray-accel start failed (attempt {attempt} of {attempts}), starting again: {last}")
        raise AssertionError("unreachable")

    @staticmethod
    def _split(args: list[str]) -> tuple[list[str], str, list[str]]:
        if "--" not in args:
            return args, "", []
        cut = args.index("--")
        return args[:cut], "--", args[cut + 1 :]

    def recorded_pids(self) -> list[int]:
        """Every process the state record names (the GCS, raylets, dashboard, ...)."""
        from ray_accel.cluster.record import parse_record

        path = Path(self.state) / "host.json"
        return [p.pid for p in parse_record(path.read_bytes(), str(path)).processes()]

    def stop(self) -> None:
        """`ray-accel stop` (by PID, what `start` recorded), then the state
        directory, only once stop succeeded."""
        if not os.path.isdir(self.state):
            return
        with shielded():
            proc = self.cli("stop", "--grace", "2", "--json", timeout_s=300)
            if proc.returncode != 0:
                say(
                    f"ray-accel stop failed ({proc.returncode}): {proc.stderr.strip()[-500:]}; "
                    f"state kept: RAYACCEL_STATE_DIR={self.state} ray-accel stop"
                )
                return
            shutil.rmtree(self.state, ignore_errors=True)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])
