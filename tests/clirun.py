"""The CLI run in this process, through its entry function.

`ray_accel.cli.main` is what the console script calls: the same argument
handling, the same exit codes, the same text on stdout and stderr. Running it
here costs microseconds where a `ray-accel` subprocess costs a Python start-up
and every import (about a second on two busy cores), which is what hundreds of
bad-input cases spent their time on. A real subprocess stays where one is
needed: a hang that only a timeout can end, a signal, a cluster that must
outlive the call, a check of what the installed console script does.

Each call sees exactly the environment a subprocess would (the caller's,
without any `RAYACCEL_*`, plus `env`), and the process's environment, signal
handlers and once-per-process warnings are put back afterwards, so one case
never leaks into the next.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import traceback
from collections.abc import Iterator, Mapping
from typing import Any

from ray_accel.cli import main
from ray_accel.cluster import statedir

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """os.environ is exactly `env` inside, and as it was afterwards."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def child_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """What `tests.cli_process.run_cli` gives its subprocess."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("RAYACCEL_")}
    full.update(env or {})
    return full


def run_cli_here(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`ray-accel ARGS` in this process, as a finished subprocess would report it."""
    out, err = io.StringIO(), io.StringIO()
    handlers = {s: signal.getsignal(s) for s in _SIGNALS}
    # A warning is printed once per process; each call here stands for a process of its own.
    statedir.warn.cache_clear()
    try:
        with environment(child_env(env)), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except Exception:
                # What the console script does with an exception main lets through.
                traceback.print_exc()
                code = 1
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        statedir.warn.cache_clear()
    return subprocess.CompletedProcess(["ray-accel", *args], code, out.getvalue(), err.getvalue())


def cli_json_here(*args: str, env: Mapping[str, str] | None = None) -> Any:
    """`ray-accel ARGS --json` in this process, which must succeed: its result."""
    proc = run_cli_here(*args, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
