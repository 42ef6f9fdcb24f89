"""Click parameter types backed by `ray_accel.core.validate`, so a bad number is
refused at the edge, naming the flag and the value (exit 2)."""

from __future__ import annotations

from typing import Any

import click

from ray_accel.core import validate
from ray_accel.core.errors import InputError


def _flag(param: click.Parameter | None) -> str:
    return param.opts[0] if param is not None and param.opts else "value"


def _reason(error: InputError) -> str:
    """The validator's message without its leading flag name: click already
    says "Invalid value for '--flag'"."""
    return str(error).split(": ", 1)[-1]


class AsciiInt(click.ParamType[int]):
    """An integer in ASCII digits within [lo, hi] (click's INT also takes '٤')."""

    name = "integer"

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return validate.ascii_int(value, _flag(param), self.lo, self.hi)
        except InputError as e:
            self.fail(_reason(e), param, ctx)


class FiniteFloat(click.ParamType[float]):
    """A finite number within [lo, hi]: no nan, no inf, no negative timeouts."""

    name = "number"

    def __init__(self, lo: float, hi: float) -> None:
        self.lo, self.hi = lo, hi

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            return validate.finite_float(value, _flag(param), self.lo, self.hi)
        except InputError as e:
            self.fail(_reason(e), param, ctx)


class HostPort(click.ParamType[str]):
    name = "host:port"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            host, port = validate.host_port(str(value), _flag(param))
        except InputError as e:
            self.fail(_reason(e), param, ctx)
        return f"{host}:{port}"


PARTITION_COUNT = AsciiInt(1, 1024)
PORT = AsciiInt(1024, 65535)
MAX_WORKERS = AsciiInt(16, 20000)
