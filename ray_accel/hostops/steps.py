"""The named steps of a host change, and the one way a change takes one.

A step is written to the host record (`HostChange.step`) before it is taken,
then announced on stderr as `step <name>: <what>`. So after a crash at any
point the record names the step that was under way, and `start --recover`
(`ray_accel.hostops.recover`) takes it again: every step can be taken twice
(a drain of a draining raylet keeps the first request; a stop signals only
what is still ours; a launch first stops whatever an earlier try of it left).

`RAYACCEL_CRASH_AT=<step>` (or `<step>@<partition>`) makes the process taking
the change SIGKILL itself right after announcing that step, the record
already written and nothing of the step taken: the test-only failpoint the
crash tests use (etcd's failpoints are the precedent). It is read at each
step, so a test sets it in the environment of the command it kills.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

CRASH_ENV = "RAYACCEL_CRASH_AT"

# The steps, in the order a change takes them (docs/design.md, "Host changes").
PLANNED = "planned"  # the change is recorded, nothing taken yet
DRAIN = "drain"  # one touched partition: drained through Ray
LEAVE = "leave"  # the drained partitions' metrics exporters leave their raylets
WAIT = "wait"  # until Ray ends the drained raylets, or the drain's deadline
STOP = "stop"  # one touched partition: what is left of its raylet stopped by PID
LAUNCH = "launch"  # one target partition: its raylet started
REGISTER = "register"  # until the GCS has every new raylet
FINISH = "finish"  # the change leaves the record; the new partitions' exporters start
STEPS = (PLANNED, DRAIN, LEAVE, WAIT, STOP, LAUNCH, REGISTER, FINISH)

# The health decider's own steps on a device out of service, kept in its kept
# device health before they run (not a host change's, so not in STEPS).
CHECK = "check"  # an active check of the device (`DevicePlugin.check`)
REPAIR = "repair"  # a repair of the device as its driver asks (`DevicePlugin.repair`)


def crashes_here(step: str, partition: str | None, asked: str | None) -> bool:
    """Whether the failpoint `asked` (`step` or `step@partition`) names this step."""
    if not asked:
        return False
    name, _, where = asked.partition("@")
    return name == step and (not where or where == partition)


def announce(step: str, what: str, progress: Callable[[str], None], partition: str | None = None) -> None:
    """Say `step <name>: <what>`, then die here if the failpoint names this step."""
    progress(f"step {step}: {what}")
    if crashes_here(step, partition, os.environ.get(CRASH_ENV)):
        os.kill(os.getpid(), signal.SIGKILL)
