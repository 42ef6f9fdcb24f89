"""Click parameter types backed by `ray_accel.core.validate`, so a bad number is
refused at the edge, naming the flag and the value (exit 2)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ray_accel.cli.output import warn
from ray_accel.core import validate
from ray_accel.core.errors import InputError

if TYPE_CHECKING:
    from ray_accel.cluster.raylet import Split

T = TypeVar("T")


class Checked(click.ParamType[T]):
    """A value `check(value, flag)` accepts, or a usage error naming the
    flag and saying why (click's own message names the value)."""

    def __init__(self, name: str, check: Callable[[Any, str], T]) -> None:
        self.name, self.check = name, check

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> T:
        try:
            return self.check(value, param.opts[0] if param is not None and param.opts else "value")
        except InputError as e:
            # The validator's reason alone: click already says "Invalid value for '--flag'".
            self.fail(str(e).split(": ", 1)[-1], param, ctx)


def ascii_int(lo: int, hi: int) -> Checked[int]:
    """An integer in ASCII digits within [lo, hi] (click's INT also takes '٤')."""
    return Checked("integer", lambda value, flag: validate.ascii_int(value, flag, lo, hi))


HOST_PORT = Checked("host:port", lambda value, flag: "{}:{}".format(*validate.host_port(str(value), flag)))
F = TypeVar("F", bound=Callable[..., Any])

PARTITION_COUNT = ascii_int(1, 1024)
PORT = ascii_int(1024, 65535)
MAX_WORKERS = ascii_int(16, 20000)


def seconds(flag: str, lo: float, hi: float, default: float, help: str) -> Callable[[F], F]:
    """A number of seconds within [lo, hi] (finite: no nan, no inf, no
    negative timeouts), its default shown in --help."""
    number = Checked("number", lambda value, flag: validate.finite_float(value, flag, lo, hi))
    return click.option(flag, type=number, default=default, show_default=True, help=help)


def drain_deadline_option(help: str) -> Callable[[F], F]:
    """`--drain-deadline`: seconds, up to a week, 120 by default."""
    return seconds("--drain-deadline", 0, 7 * 24 * 3600, 120.0, help)


def _check_timeout(value: Any, flag: str) -> float:
    from ray_accel.plugins.check_runner import check_timeout

    number = validate.finite_float(value, flag, 0)
    try:
        return check_timeout(number)
    except InputError as e:
        raise InputError(f"{flag}: {e}") from None


CHECK_TIMEOUT = Checked("number", _check_timeout)


def check_timeout_option(help: str) -> Callable[[F], F]:
    """`--check-timeout`: seconds above 0, at most a day (`check_runner.check_timeout`), 60 by default."""
    return click.option("--check-timeout", type=CHECK_TIMEOUT, default=60.0, show_default=True, help=help)


def grouped(name: str, build: Callable[..., Any], *options: Callable[[F], F]) -> Callable[[F], F]:
    """`options` given to the command as one typed value, its parameter `name`:
    what `build` makes of theirs (its parameters are the options' names)."""
    own = list(inspect.signature(build).parameters)

    def decorate(f: F) -> F:
        @functools.wraps(f)
        def command(*args: Any, **kwargs: Any) -> Any:
            value = build(**{k: kwargs.pop(k) for k in own})
            return f(*args, **{name: value}, **kwargs)

        for option in reversed(options):
            command = option(command)
        return command  # type: ignore[return-value]

    return decorate


def _old_partitions(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """`--agents N`, the earlier spelling of `--partitions N`: still parsed, never
    shown; a bad value is refused naming `--partitions`, and a good one warned
    of (on stderr, or with --json inside the JSON document: `output.warn`)."""
    if value is None:
        return None
    partitions = next(p for p in ctx.command.params if p.name == "partitions")
    count = PARTITION_COUNT.convert(value, partitions, ctx)
    warn("--agents is deprecated: use --partitions")
    return count


def _split(
    mode: str | None, partitions: int | None, agents: int | None, manual: str | None, backend: str | None
) -> Split:
    """The `Split` the options give (imported here: `cluster.raylet` is the start path's, not every command's)."""
    from ray_accel.cluster.raylet import Split

    return Split.given(mode, partitions if agents is None else agents, manual, backend)


def split_options(partitions_help: str, manual_help: str, backend_help: str) -> Callable[[F], F]:
    return grouped(
        "split",
        _split,
        click.option("--mode", default=None, show_default="auto-split", help="shared, auto-split or manual"),
        click.option("--partitions", type=PARTITION_COUNT, help=partitions_help),
        click.option("--agents", hidden=True, callback=_old_partitions),
        click.option("--manual", metavar="SPEC", help=manual_help),
        click.option("--backend", help=backend_help),
    )
