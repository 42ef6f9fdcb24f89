"""The one reader of untrusted input: a file, JSON or TOML text, or a value
parsed from them, into frozen values.

Everything read from outside (state files, health files, a tool's output, a
spec file, a value passed on a command line) goes through here, so each check
is written once and every refusal is a `ReadError` whose message names the
path of the bad field: `partitions[2].raylet.pid: 'x' is not an integer`.

- `parse_json` / `parse_toml` / `read_file`: the envelope (size bound, UTF-8,
  nesting depth, bad syntax naming the source).
- `Cursor`: a cursor over parsed data that carries its path, for readers whose
  fields need their own checks; a `Style` writes paths and refusals in a
  reader's own words where its users already know them.
- `load` / `dump`: a frozen dataclass from and to JSON-able data, driven by
  its annotations, for typed values that cross a process boundary.
"""

from __future__ import annotations

import builtins
import collections
import dataclasses
import enum
import json
import math
import os
import tomllib
import types
import typing
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, NoReturn, TypeVar

from ray_accel.core import files
from ray_accel.core.errors import InputError

T = TypeVar("T")
E = TypeVar("E", bound=enum.Enum)

MAX_DEPTH = 32  # no input of ours nests deeper; deeper would only feed recursion
MAX_TEXT = 4096
MAX_ITEMS = 4096
CONTROL = "".join(map(chr, [*range(32), 127]))
LINE_BREAKS = "\r\n\x00"
_MISSING: Any = object()


class ReadError(InputError):
    """Input that does not fit; `path` names the field (empty: the whole input)."""

    def __init__(self, problem: str, path: str = "", sep: str = ": ") -> None:
        super().__init__(f"{path}{sep}{problem}" if path else problem)
        self.problem, self.path = problem, path


def show(value: object, limit: int = 60) -> str:
    """`repr(value)` cut short, so a refusal stays one readable line."""
    try:
        text = repr(value)
    except ValueError:  # an integer past Python's str() digit limit
        text = f"<{type(value).__name__} too large to show>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def join(path: str, key: str | int) -> str:
    """The path of `key` under `path`: `a.b`, `a[2]`."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


# ------------------------------------------------------------------ the envelope


def _no_duplicates(pairs: list[tuple[str, object]]) -> object:
    out = dict(pairs)
    if len(out) < len(pairs):
        twice = next(k for k, n in collections.Counter(k for k, _ in pairs).items() if n > 1)
        raise ValueError(f"key {show(twice)} appears twice in one object")
    return out


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _check_depth(data: object) -> None:
    """`RecursionError` where `data` nests more than MAX_DEPTH levels."""
    stack = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth >= MAX_DEPTH:
                raise RecursionError
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))


def _decode(raw: bytes | str) -> str:
    try:
        return raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text (byte {e.start})") from None


def parse_json(
    raw: bytes | str, source: str, bad: str = "{source} is not valid JSON: {error}", nan: bool = False
) -> object:
    """Strict JSON (no duplicate keys; NaN and Infinity only with `nan`) of at
    most MAX_DEPTH levels, or `ReadError` worded by `bad` naming `source`."""
    try:
        data = json.loads(_decode(raw), object_pairs_hook=_no_duplicates, parse_constant=float if nan else _no_constant)
        _check_depth(data)
    except RecursionError:
        raise ReadError(bad.format(source=source, error=f"nested too deeply (more than {MAX_DEPTH} levels)")) from None
    except ValueError as e:  # JSONDecodeError, a duplicate, NaN, UTF-8, int()'s digit limit
        raise ReadError(bad.format(source=source, error=e)) from None
    return data


def parse_toml(raw: bytes | str, source: str, bad: str = "malformed TOML in {source}: {error}") -> dict[str, Any]:
    """A TOML document, with the checks of `parse_json`."""
    try:
        data = tomllib.loads(_decode(raw))
        _check_depth(data)
    except RecursionError:
        raise ReadError(bad.format(source=source, error="arrays or tables nested too deeply")) from None
    except tomllib.TOMLDecodeError as e:
        raise ReadError(bad.format(source=source, error=e)) from None
    except ValueError as e:  # UTF-8, or int()'s 4300-digit limit, which tomllib lets through
        error = e if str(e).startswith("not UTF-8") else "a number too long to read"
        raise ReadError(bad.format(source=source, error=error)) from None
    return data


def parse_document(
    raw: bytes | str, source: str, read: Callable[[Cursor], T], error: Callable[[str], Exception], misfit: str
) -> T:
    """`read` of the JSON document in `raw` (`source`: "state file X"), every
    refusal raised as `error`: bad syntax as `parse_json` words it, a field
    that does not fit as `{source} {misfit}: {path}: {problem}`."""
    try:
        data = parse_json(raw, source)
    except ReadError as e:
        raise error(str(e)) from None
    try:
        return read(Cursor(data))
    except ReadError as e:
        raise error(f"{source} {misfit}: {e}") from None


def read_file(path: str | os.PathLike[str], source: str, max_bytes: int, follow: bool = False) -> bytes | None:
    """The bytes of the regular file `path` (bounded, never blocking: see
    `files.read_bytes`), None when there is none, or `ReadError` naming
    `source` and why it cannot be read."""
    try:
        return files.read_bytes(path, max_bytes, follow)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ReadError(files.describe(e), source) from None


# --------------------------------------------------------------------- the cursor


@dataclasses.dataclass(frozen=True)
class Style:
    """How refusals are written: `child` makes a field's path from its
    parent's and its key, `sep` goes between a path and its problem, and
    `words` replaces standard wordings by check (`mapping`, `list`, `size`,
    `text`, `int`, `number`, `bool`; `{value}` is the value shown, `size`
    also has `{count}` and `{limit}`)."""

    child: Callable[[str, str | int], str] = join
    sep: str = ": "
    words: Mapping[str, str] = dataclasses.field(default_factory=dict)


DOTTED = Style()


class Cursor:
    """Parsed data at `path`; each method checks it as one kind of value and
    returns it, or raises `ReadError` naming the path. `message`, where
    taken, replaces the standard wording (`{value}` is the value shown,
    `{key}` the key it was read from)."""

    __slots__ = ("data", "key", "path", "style")

    def __init__(self, data: object, path: str = "", style: Style = DOTTED, key: str | builtins.int = "") -> None:
        self.data, self.path, self.style, self.key = data, path, style, key

    def fail(self, problem: str) -> NoReturn:
        raise ReadError(problem, self.path, self.style.sep)

    def _refuse(self, message: str | None, standard: str, check: str = "", **fields: object) -> NoReturn:
        wording = message or self.style.words.get(check, standard)
        self.fail(wording.format(value=show(self.data), key=self.key, **fields))

    def _child(self, data: object, key: str | builtins.int) -> Cursor:
        return Cursor(data, self.style.child(self.path, key), self.style, key)

    def mapping(self, message: str | None = None) -> Mapping[str, object]:
        if not isinstance(self.data, dict):
            self._refuse(message, f"{type(self.data).__name__} is not an object", "mapping")
        return self.data

    def only(self, allowed: Collection[str], message: str | None = None) -> Cursor:
        """This object, with no key beyond `allowed` (`message`: `{value}` is the key shown)."""
        for key in self.mapping():
            if key not in allowed:
                self._child(key, key if key.isprintable() else show(key))._refuse(message, "unknown key {value}")
        return self

    def at(self, key: str, default: object = _MISSING) -> Cursor:
        """The value under `key`; `default` where absent, else a refusal
        naming the key as missing."""
        data = self.mapping()
        if key in data or default is not _MISSING:
            return self._child(data.get(key, default), key)
        self._child(None, key).fail("missing")

    def items(self, limit: builtins.int = MAX_ITEMS) -> Iterator[tuple[str, Cursor]]:
        data = self.mapping()
        if len(data) > limit:
            self._refuse(None, "{count} entries, more than {limit}", "size", count=len(data), limit=limit)
        return ((k, self._child(v, k)) for k, v in data.items())

    def list(self, limit: builtins.int = MAX_ITEMS, message: str | None = None) -> builtins.list[Cursor]:
        if not isinstance(self.data, list):
            self._refuse(message, "{value} is not a list", "list")
        if len(self.data) > limit:
            self._refuse(None, "{count} entries, more than {limit}", "size", count=len(self.data), limit=limit)
        return [self._child(v, i) for i, v in enumerate(self.data)]

    def texts(self, limit: builtins.int = MAX_TEXT, count: builtins.int = MAX_ITEMS) -> tuple[str, ...]:
        """A list of at most `count` strings, each as `text` reads it."""
        return tuple(v.text(limit) for v in self.list(count))

    def optional(self) -> Cursor | None:
        """None for a null, else this node."""
        return None if self.data is None else self

    def text(
        self,
        limit: builtins.int = MAX_TEXT,
        empty: builtins.bool = False,
        forbid: str = CONTROL,
        message: str | None = None,
        printable: builtins.bool = False,
    ) -> str:
        """A string of at most `limit` characters (at least one unless `empty`)
        holding none of `forbid` (control characters, by default), and only
        printable ones (`str.isprintable`) with `printable`."""
        value = self.data
        if not isinstance(value, str):
            self._refuse(message, "{value} is not a string", "text")
        if not value and not empty:
            self._refuse(message, "empty")
        if len(value) > limit:
            self._refuse(message, f"{len(value)} characters, more than {limit}")
        if (forbid and any(c in forbid for c in value)) or (printable and not value.isprintable()):
            self._refuse(message, "{value} is not one line of text")
        return value

    def int(
        self, lo: float = -math.inf, hi: float = math.inf, message: str | None = None, above: str | None = None
    ) -> builtins.int:
        """An integer in lo..hi; `above`, where given, words one over `hi`."""
        value = self.data
        if type(value) is not int:
            self._refuse(message, "{value} is not an integer", "int")
        if value > hi and above:
            self._refuse(above, "")
        if not lo <= value <= hi:
            self._refuse(message, f"{{value}} is outside {lo}..{hi}")
        return value

    def number(
        self, lo: float = -math.inf, hi: float = math.inf, message: str | None = None, above: str | None = None
    ) -> float:
        """A finite number in lo..hi, as a float; `above` as for `int`."""
        value = self.data
        if isinstance(value, bool) or not isinstance(value, int | float):
            self._refuse(message, "{value} is not a number", "number")
        if math.isfinite(value) and value > hi and above:
            self._refuse(above, "")
        if not math.isfinite(value) or not lo <= value <= hi:
            self._refuse(message, f"{{value}} is outside {lo:g}..{hi:g}")
        return float(value)

    def bool(self, message: str | None = None) -> builtins.bool:
        if not isinstance(self.data, bool):
            self._refuse(message, "{value} is not true or false", "bool")
        return self.data

    def one_of(self, choices: Collection[str], message: str | None = None) -> str:
        if not isinstance(self.data, str) or self.data not in choices:
            self._refuse(message, f"{{value}} is not one of {', '.join(choices)}")
        return self.data

    def enum(self, kind: type[E]) -> E:
        try:
            return kind(self.data)
        except ValueError:
            self.fail(f"{show(self.data)} is not one of {', '.join(str(m.value) for m in kind)}")


def kept(read: Callable[[Cursor], T], node: Cursor, problems: builtins.list[str]) -> T | None:
    """`read(node)`, or None with its refusal added to `problems`: for input
    whose bad parts are skipped on purpose, each one named."""
    try:
        return read(node)
    except ReadError as e:
        problems.append(str(e))
        return None


# ------------------------------------------------------------- typed values


def _load(kind: Any, node: Cursor) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if node.data is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"cannot read a value of type {kind}")
        return _load(rest[0], node)
    if origin is tuple:
        items = node.list(1 << 20, f"{type(node.data).__name__} is not a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_load(args[0], item) for item in items)
        if len(items) != len(args):
            node.fail(f"expected {len(args)} entries, got {len(items)}")
        return tuple(_load(a, item) for a, item in zip(args, items, strict=True))
    if origin is Mapping:
        return {k: _load(args[1], v) for k, v in node.items()}
    if origin is typing.Literal:
        if node.data not in args or type(node.data) is not type(args[args.index(node.data)]):
            node.fail(f"{show(node.data)} is not one of {', '.join(map(str, args))}")
        return node.data
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return node.enum(kind)
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        return _load_object(kind, node)
    readers: dict[Any, Any] = {
        bool: Cursor.bool,
        int: lambda n: n.int(-(1 << 63), (1 << 64) - 1),
        # Any int or float, kept as given: a value's own checks bound it.
        float: lambda n: n.data if type(n.data) in (int, float) else n.fail(f"{show(n.data)} is not a number"),
        str: lambda n: n.text(1 << 20, empty=True, forbid=""),
    }
    if kind not in readers:
        raise TypeError(f"cannot read a value of type {kind}")
    return readers[kind](node)


def _load_object(cls: type[T], node: Cursor) -> T:
    fields = [f for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    node.only([f.name for f in fields])
    hints = typing.get_type_hints(cls)
    values = {}
    for f in fields:
        if f.name in node.mapping() or f.default is f.default_factory is dataclasses.MISSING:
            values[f.name] = _load(hints[f.name], node.at(f.name))
    try:
        return cls(**values)
    except ReadError as e:  # the value's own checks, which name its field
        raise type(e)(e.problem, join(node.path, e.path) if e.path else node.path) from None
    except ValueError as e:
        node.fail(str(e))


def load(cls: type[T], data: object, where: str = "") -> T:
    """The frozen dataclass `cls` from JSON-able `data` (as `dump` writes it),
    read by its annotations: int, float, str, bool, unions with None,
    tuple[X, ...] and fixed tuples, Mapping[str, X], Enum, Literal and nested dataclasses.
    Absent fields take their defaults; an unknown key, a missing field or a
    value of the wrong kind is a `ReadError` naming its path under `where`."""
    return typing.cast(T, _load(cls, Cursor(data, where)))


# A dataclass field's metadata for what stays in the process: `dump` leaves it
# out (`field(default=None, metadata=LOCAL)`), so `load` gives its default.
LOCAL: Mapping[str, bool] = types.MappingProxyType({"local": True})


# Values `dump` returns as they are, by exact type (an enum that is also a str is not one).
_SCALARS = frozenset({str, int, float, bool, type(None)})


_FIELDS: dict[type, tuple[str, ...]] = {}


def _dumped_fields(cls: type) -> tuple[str, ...]:
    """The fields `dump` writes of dataclass `cls`, in order (read once per class)."""
    if cls not in _FIELDS:
        _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls) if not f.metadata.get("local"))
    return _FIELDS[cls]


def dump(value: object) -> object:
    """`value` as JSON-able data: a dataclass as an object of its fields (but
    those marked `LOCAL`), an enum as its value, a tuple as a list. `load`
    reads it back."""
    # Views of hundreds of partitions are mostly plain values, lists and
    # dicts: those are told apart by their exact type first, and a scalar
    # inside a container is kept without a call.
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is list or kind is tuple:
        return [v if type(v) in _SCALARS else dump(v) for v in typing.cast(list[object], value)]
    if kind is dict:
        items = typing.cast(dict[object, object], value).items()
        return {str(k): v if type(v) in _SCALARS else dump(v) for k, v in items}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: dump(getattr(value, name)) for name in _dumped_fields(kind)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [dump(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): dump(v) for k, v in value.items()}
    return value


def dump_one_level(value: object) -> object:
    """`dump` of `value` itself, what it holds left as it is: what `json`
    is given for a value it cannot write (its `default`), so that it writes
    what `dump` would. The rest (str, numbers, None, lists, tuples, dicts with
    str keys, and enums that are str or int) it writes itself, as `dump` would."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: getattr(value, name) for name in _dumped_fields(type(value))}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    if isinstance(value, tuple | list):
        return list(value)
    raise TypeError(f"a {type(value).__name__} is not JSON-able: {value!r}")


def dump_fields(value: object, **extra: object) -> dict[str, object]:
    """The dataclass `value` as a JSON object (as `dump` writes it), with the
    keys of `extra` after its fields: for a view that adds a few."""
    return {**typing.cast(dict[str, object], dump(value)), **extra}
