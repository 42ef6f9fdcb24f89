"""The host's helper processes: ray-accel's own long-lived processes beside
the raylets, each `python -m MODULE` in a session of its own (a Ctrl-C in the
shell that started it never reaches it), recorded in the host record beside
the partitions' processes and checked and stopped as they are, by PID.

This layer starts, records and stops them by kind without knowing what they
do: one explicit table (`procs.OWN_PROCESSES`) names the module each kind
runs, and refuses a kind it does not hold."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ray_accel.cluster import procs, statedir
from ray_accel.cluster.record import HostRecord, RayProcess
from ray_accel.core import reader
from ray_accel.core.errors import InputError, RayAccelError
from ray_accel.core.files import open_for_write
from ray_accel.core.processes import ProcessRecord
from ray_accel.plugins.discovery import SPEC_ENV
from ray_accel.rayapi.gcs import Progress

# What the CLI runs once every partition is up, at the end of a start (inside
# its undo) or a recover, under the lock: the health layer starts its helper
# (again, where it is gone).
After = Callable[[HostRecord, Progress], HostRecord]
T = TypeVar("T")


def identity_of(kind: str) -> str:
    """What a helper of `kind` runs (`-m MODULE`); `RayAccelError` for a kind the table does not hold."""
    if kind not in procs.OWN_PROCESSES:
        known = ", ".join(sorted(procs.OWN_PROCESSES))
        raise RayAccelError(f"no helper of kind {kind!r}: the helper kinds are {known}")
    (identity,) = procs.OWN_PROCESSES[kind]
    return identity


def spawn(
    kind: str, what: str, inputs: object, log: Path, spec: str | None = None
) -> tuple[RayProcess, subprocess.Popen[bytes]]:
    """Start a helper of a known `kind` (`what` it is, in messages) with
    `inputs` (a frozen value, on its command line: `read_inputs`), its output
    to `log`, the raylets' bridge `spec` in its environment (so that its
    backend is theirs); its record (PID, start time, identity) and its
    handle, not yet waited for."""
    try:
        fd = open_for_write(log)
    except OSError as e:
        raise RayAccelError(f"cannot write {what}'s log {log}: {e}") from None
    identity = identity_of(kind)
    argv = [sys.executable, *identity.split(" ", 1), json.dumps(reader.dump(inputs))]
    proc = procs.spawn(argv, {**os.environ, SPEC_ENV: spec} if spec else os.environ, fd)
    # Not yet waited for, so its PID is not reused; its identity is what it
    # was started with (its command line may read empty for a moment after exec).
    found = ProcessRecord.of(proc.pid)
    if found is None:
        proc.kill()
        raise RayAccelError(f"{what} exited at once; see {log}")
    return RayProcess(kind, proc.pid, found.start_ticks, identity), proc


def read_inputs(cls: type[T], argv: Sequence[str] | None, module: str) -> T:
    """The inputs `spawn` handed the helper `python -m module`; a usage error (exit 2) for anything else."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}")
    parser.add_argument("inputs", help=f"{cls.__name__}, as JSON")
    try:
        return reader.load(cls, reader.parse_json(parser.parse_args(argv).inputs, f"{module}'s inputs"), "inputs")
    except InputError as e:
        parser.error(str(e))


@dataclass(frozen=True)
class HelperInputs:
    """What every helper is started with: the directory of the record it
    serves, the record's `created` (another start's record is not its own)
    and whether RAYACCEL_STATE_DIR named the directory."""

    state_dir: str
    created: float
    explicit: bool

    @property
    def place(self) -> statedir.Place:
        directory = Path(self.state_dir)
        return statedir.Place(directory, directory / statedir.STATE_FILE, self.explicit)


def stop(place: statedir.Place, grace_s: float = 10.0) -> list[int]:
    """Stop the helpers the record at `place` names that are ours (a failed
    start, and `stop` before anything else); the PIDs signalled."""
    try:
        record = statedir.load(place)
    except RayAccelError:
        return []
    ours = [r.record for r in record.helpers() if procs.check(r).ours] if record is not None else []
    return procs.terminate(ours, grace_s)
