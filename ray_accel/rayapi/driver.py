"""Where a connected driver prints what its raylets push to it, and what
a CLI driver leaves out of its serializers.

Ray 2.60's driver prints every error message the cluster pushes to it (a
raylet's "N PYTHON worker processes have been started ..." among them) to
stdout, whatever `log_to_driver` says: `ray._private.worker.
listen_error_messages` hands them to `print_to_stdstream` with `is_err`
false. A command whose stdout is its result (`status --json`, `top --json`,
`jobs --json`) must keep them out of it."""

from __future__ import annotations

from typing import Any

from ray_accel.rayapi.feature import RayApiMissing, attr, module

WORKER = "ray._private.worker"
_ROUTED = "_ray_accel_to_stderr"
ARROW = "ray._private.arrow_serialization"
ARROW_HOOK = "_register_custom_datasets_serializers"


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


def without_arrow_serializers() -> None:
    """This process's driver registers no Arrow serializers. Ray 2.60
    registers them on a driver's first call to an actor or task whenever
    pyarrow is installed (`ray.util.serialization_addons.apply` calls
    `ray._private.arrow_serialization._register_custom_datasets_serializers`,
    which imports pyarrow, and numpy with it): half a second on a small
    host, for Ray Data's tables, which a CLI driver reading snapshots never
    sends. Where this Ray has no such hook, nothing changes."""
    try:
        arrow = module(ARROW)
        attr(arrow, ARROW_HOOK, ARROW)
    except RayApiMissing:
        return

    def none(context: object) -> None:
        return None

    setattr(arrow, ARROW_HOOK, none)
