"""Where a connected driver prints what its raylets push to it.

Ray 2.60's driver prints every error message the cluster pushes to it (a
raylet's "N PYTHON worker processes have been started ..." among them) to
stdout, whatever `log_to_driver` says: `ray._private.worker.
listen_error_messages` hands them to `print_to_stdstream` with `is_err`
false. A command whose stdout is its result (`status --json`, `top --json`,
`jobs --json`) must keep them out of it."""

from __future__ import annotations

from typing import Any

from ray_accel.rayapi.feature import attr, module

WORKER = "ray._private.worker"
_ROUTED = "_ray_accel_to_stderr"


def pushed_messages_to_stderr() -> None:
    """From now on, this process's driver prints pushed messages to stderr
    (call before `ray.init`; calling it again changes nothing)."""
    worker = module(WORKER)
    printer = attr(worker, "print_to_stdstream", WORKER)
    if getattr(printer, _ROUTED, False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        printer({**data, "is_err": True}, ignore_prefix)

    setattr(to_stderr, _ROUTED, True)
    worker.print_to_stdstream = to_stderr  # type: ignore[attr-defined]
