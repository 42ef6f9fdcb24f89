"""What a `ray start` argument list means (`ray_accel.cluster.raylet`):
the parser against Ray's own `ray start` command, and properties of parsing,
reading, filtering and building argument lists."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_accel.cluster import raylet
from ray_accel.cluster.raylet import (
    HOST_FLAGS,
    NO_VALUE,
    VALUE,
    Arg,
    flag_names,
    flag_value,
    launch_argv,
    parse,
    parse_launch_argv,
    render,
    validate_ray_args,
    without,
)
from ray_accel.core.errors import InputError
from tests.badinput import badinput

UNKNOWN = ("--future-flag", "--gpu-memory-fraction", "--x")
words = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
plain_words = words.filter(lambda w: not w.startswith("-"))
tokens = st.one_of(
    st.sampled_from(sorted(NO_VALUE | VALUE) + list(UNKNOWN) + ["--", "-", "-v"]),
    st.builds(lambda f, v: f"{f}={v}", st.sampled_from(sorted(VALUE) + list(UNKNOWN)), words),
    words,
)


def test_the_flag_table_is_rays_own() -> None:
    """Which `ray start` options take a value, as the installed Ray's click
    command declares them."""
    from ray.scripts.scripts import start

    def no_value(p: object) -> bool:
        return bool(getattr(p, "is_flag", False) or getattr(p, "count", False))

    flags = {o for p in start.params if no_value(p) for o in p.opts}
    valued = {o for p in start.params if not no_value(p) for o in p.opts}
    assert NO_VALUE - {"--help"} == flags
    assert valued == VALUE


@given(st.lists(tokens, max_size=12))
def test_any_list_round_trips(args: list[str]) -> None:
    assert render(parse(args)) == args


def _arg() -> st.SearchStrategy[Arg]:
    return st.one_of(
        st.builds(Arg, st.sampled_from(sorted(VALUE)), words, st.booleans()),  # Ray's: any value, both forms
        st.builds(Arg, st.sampled_from(sorted(NO_VALUE))),
        st.builds(Arg, st.sampled_from(UNKNOWN), plain_words, st.just(False)),  # unknown, separate value
        st.builds(Arg, st.sampled_from(UNKNOWN), words, st.just(True)),  # unknown, --f=v
        st.builds(Arg, st.sampled_from(UNKNOWN)),  # unknown, alone
        st.builds(Arg, st.none(), plain_words),  # a bare word
    )


def _well_formed(items: list[Arg]) -> list[Arg]:
    """As one would write them: a flag alone that takes or may take a value
    is followed by another option (or ends the list)."""
    out = []
    for i, a in enumerate(items):
        following = items[i + 1].tokens()[0] if i + 1 < len(items) else None
        alone = a.name is not None and a.value is None and a.name not in NO_VALUE
        if alone and following is not None and (a.name in VALUE or not following.startswith("-")):
            a = Arg(a.name, "v", joined=True)
        out.append(a)
    return out


@given(st.lists(_arg(), max_size=10))
def test_a_built_list_parses_back_to_what_was_built(items: list[Arg]) -> None:
    items = _well_formed(items)
    assert list(parse(render(items))) == items


@given(st.sampled_from(sorted(VALUE)), words, words)
def test_a_value_reads_the_same_in_both_forms_and_the_last_wins(flag: str, first: str, last: str) -> None:
    assert flag_value([flag, first], flag) == first
    assert flag_value([f"{flag}={first}"], flag) == first
    assert flag_value([flag, first, "--temp-dir", "/t", f"{flag}={last}"], flag) == last
    carrier = "--node-name" if flag == "--temp-dir" else "--temp-dir"
    assert flag_value([carrier, flag], flag) is None, "a value is never an option"


@given(st.lists(_arg(), max_size=10), st.sets(st.sampled_from([*sorted(HOST_FLAGS), "--include-dashboard"])))
def test_without_drops_exactly_the_named_flags_and_keeps_unknown_ones(items: list[Arg], drop: set[str]) -> None:
    items = _well_formed(items)
    kept = without(render(items), drop)
    assert kept == render(a for a in items if a.name not in drop)
    for a in items:
        if a.name in UNKNOWN:
            assert a.tokens()[0] in kept, "an option this Ray does not have is passed on as given"


@badinput("launcher")
@pytest.mark.parametrize("given_", [["--num-cpus"], ["--temp-dir=/t", "--memory"]])
def test_a_flag_without_its_value_is_refused_naming_it(given_: list[str]) -> None:
    flag = given_[-1]
    with pytest.raises(InputError, match=f"^{flag} needs a value$"):
        flag_value(given_, flag)


def test_examples() -> None:
    args = ["--num-cpus", "--memory=5", "--block", "--future", "x", "--next", "--labels=a=b", "word"]
    assert parse(args) == (
        Arg("--num-cpus", "--memory=5"),  # click gives a value-taking option the next word
        Arg("--block"),
        Arg("--future", "x"),
        Arg("--next"),
        Arg("--labels", "a=b", joined=True),
        Arg(None, "word"),
    )
    assert flag_names(args) == ["--num-cpus", "--block", "--future", "--next", "--labels"]
    validate_ray_args(["--node-name", "--head"])  # --head is the node's name here, not the flag
    with pytest.raises(InputError, match="--worker_port_list is set per partition"):
        validate_ray_args(["--worker_port_list", "1"])


@badinput("launcher")
@pytest.mark.parametrize("argv", [[], ["result.json"], ["result.json", "start", "--head"]])
def test_the_launcher_refuses_a_command_line_without_its_separator(argv: list[str]) -> None:
    with pytest.raises(InputError, match="^usage: python -m ray_accel.cluster.raylet_launch RESULT -- start"):
        parse_launch_argv(argv)


@given(words, st.lists(tokens, max_size=8))
def test_the_launcher_command_line_round_trips(result: str, args: list[str]) -> None:
    assert parse_launch_argv(launch_argv(result, ["start", *args])) == (result, ["start", *args])


def test_every_interpretation_lives_here() -> None:
    """The other cluster modules call this one; none re-parses `ray start` flags."""
    import ast
    from pathlib import Path

    root = Path(raylet.__file__).parent
    for path in root.glob("*.py"):
        if path.name == "raylet.py":
            continue
        defined = {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}
        assert not defined & {"flag_names", "has_flag", "flag_value", "without", "validate_ray_args"}, path.name
