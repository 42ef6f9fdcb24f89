"""Click parameter types backed by `ray_accel.core.validate`, so a bad number is
refused at the edge, naming the flag and the value (exit 2)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from ray_accel.cluster.raylet import Split
from ray_accel.core import validate
from ray_accel.core.errors import InputError


def _flag(param: click.Parameter | None) -> str:
    return param.opts[0] if param is not None and param.opts else "value"


def _reason(error: InputError) -> str:
    """The validator's message without its leading flag name: click already
    says "Invalid value for '--flag'"."""
    return str(error).split(": ", 1)[-1]


T = TypeVar("T")


class Checked(click.ParamType[T]):
    """A value `check(value, flag)` accepts, or a usage error naming the
    flag and saying why (click's own message names the value)."""

    def __init__(self, check: Callable[[Any, str], T]) -> None:
        self.check = check

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> T:
        try:
            return self.check(value, _flag(param))
        except InputError as e:
            self.fail(_reason(e), param, ctx)


class AsciiInt(Checked[int]):
    """An integer in ASCII digits within [lo, hi] (click's INT also takes '٤')."""

    name = "integer"

    def __init__(self, lo: int, hi: int) -> None:
        super().__init__(lambda value, flag: validate.ascii_int(value, flag, lo, hi))


class FiniteFloat(Checked[float]):
    """A finite number within [lo, hi]: no nan, no inf, no negative timeouts."""

    name = "number"

    def __init__(self, lo: float, hi: float) -> None:
        super().__init__(lambda value, flag: validate.finite_float(value, flag, lo, hi))


class HostPort(Checked[str]):
    name = "host:port"

    def __init__(self) -> None:
        super().__init__(lambda value, flag: "{}:{}".format(*validate.host_port(str(value), flag)))


class HiddenAliases(click.Option):
    """An option with old spellings that still parse but are never shown:
    `--help` and usage errors name only its current spellings."""

    def __init__(self, *decls: Any, hidden_aliases: Sequence[str] = (), **attrs: Any) -> None:
        super().__init__(*decls, **attrs)
        unknown = [a for a in hidden_aliases if a not in self.opts]
        if unknown:
            raise ValueError(f"hidden alias {unknown[0]!r} is not one of {self.opts}")
        self.hidden_aliases = tuple(hidden_aliases)

    def _shown(self) -> list[str]:
        return [o for o in self.opts if o not in self.hidden_aliases]

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        # click writes the help line from `opts`; parsing reads them too, so
        # they are narrowed only while the line is written.
        opts = self.opts
        self.opts = self._shown()
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = opts

    def get_error_hint(self, ctx: click.Context | None) -> str:
        return " / ".join(f"'{o}'" for o in self._shown())

    def add_to_parser(self, parser: Any, ctx: click.Context) -> None:
        # The old spellings parse into a name of their own, so that using one
        # can be told apart (and warned of) in `handle_parse_result`.
        opts = self.opts
        self.opts = self._shown()
        try:
            super().add_to_parser(parser, ctx)
        finally:
            self.opts = opts
        parser.add_option(obj=self, opts=self.hidden_aliases, dest=f"{self.name}:alias", nargs=self.nargs)

    def handle_parse_result(self, ctx: click.Context, opts: Any, args: list[str]) -> tuple[Any, list[str]]:
        alias = f"{self.name}:alias"
        used = alias in opts
        if used:
            opts = {**{k: v for k, v in opts.items() if k != alias}, str(self.name): opts[alias]}
        value, rest = super().handle_parse_result(ctx, opts, args)
        if used:  # on stderr, never inside --json; said once the value is good
            click.echo(f"warning: {' / '.join(self.hidden_aliases)} is deprecated: use {self._shown()[0]}", err=True)
        return value, rest


F = TypeVar("F", bound=Callable[..., Any])

PARTITION_COUNT = AsciiInt(1, 1024)
PORT = AsciiInt(1024, 65535)
MAX_WORKERS = AsciiInt(16, 20000)


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


def split_options(partitions_help: str, manual_help: str, backend_help: str) -> Callable[[F], F]:
    return grouped(
        "split",
        Split.given,
        click.option("--mode", default=None, show_default="auto-split", help="shared, auto-split or manual"),
        partitions_option(partitions_help),
        click.option("--manual", metavar="SPEC", help=manual_help),
        click.option("--backend", help=backend_help),
    )


def partitions_option(help: str) -> Callable[[F], F]:
    """`--partitions N` (`--agents`, its earlier spelling, still parses)."""
    return click.option(
        "--partitions",
        "--agents",
        "partitions",
        cls=HiddenAliases,
        hidden_aliases=("--agents",),
        type=PARTITION_COUNT,
        help=help,
    )
