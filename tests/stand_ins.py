"""Stand-in Ray processes: `sleep` run under the path Ray's raylet binary has
(``ray/core/src/ray/raylet/raylet``, from ``ray/_private/services.py``'s
`start_raylet`), and the record of such a process as a host record holds it."""

from __future__ import annotations

import subprocess

from ray_accel.cluster.procs import identity
from ray_accel.cluster.record import RayProcess
from ray_accel.core.processes import ProcessRecord

RAYLET_PATH = "ray/core/src/ray/raylet/raylet"


LOOPBACK = "127.0.0.1"


def ray_process(proc: subprocess.Popen[bytes] | int, kind: str = "raylet", **over: object) -> RayProcess:
    pid = proc if isinstance(proc, int) else proc.pid
    record = ProcessRecord.of(pid)
    assert record is not None
    argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[:-1]
    fields: dict[str, object] = {
        "kind": kind,
        "pid": pid,
        "start_ticks": record.start_ticks,
        "identity": identity([a.decode() for a in argv]),
    }
    fields.update(over)
    return RayProcess(**fields)  # type: ignore[arg-type]
