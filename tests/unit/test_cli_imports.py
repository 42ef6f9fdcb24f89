"""What the CLI imports before it does any work: `--version` and `--help`
load no command (each command's module is imported when it runs), and the
one-line summaries `--help` shows without importing are the commands' own."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from ray_accel.cli import COMMANDS, cli, load_command, short_help

# Everything of ray-accel that `ray-accel --version` may import: the package
# facade (its version, its two error types) and the CLI's entry point.
VERSION_IMPORTS = ["ray_accel", "ray_accel.cli", "ray_accel.core", "ray_accel.core.errors"]
# Layers a command that prints nothing but the CLI's own text must never load.
HEAVY = ("ray_accel.cluster", "ray_accel.bridge", "ray_accel.partition", "ray_accel.plugins")

DUMP = """
import contextlib, io, json, sys
from ray_accel.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(m for m in sys.modules if m.split(".")[0] == "ray_accel")}))
"""


def imported_by(*args: str) -> list[str]:
    """The ray_accel modules a fresh interpreter has loaded after `ray-accel ARGS`."""
    proc = subprocess.run([sys.executable, "-c", DUMP, *args], capture_output=True, text=True, timeout=120, check=True)
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["code"] == 0, proc.stderr
    return list(out["modules"])


def test_version_imports_only_the_entry_point() -> None:
    assert imported_by("--version") == VERSION_IMPORTS


def test_help_imports_no_command() -> None:
    loaded = imported_by("--help")
    assert [m for m in loaded if m.startswith(HEAVY)] == []
    assert [m for m in loaded if m.startswith("ray_accel.cli.")] == []


def test_a_command_imports_its_own_module_only_when_asked() -> None:
    loaded = imported_by("status", "--help")
    assert "ray_accel.cli.status" in loaded
    assert [m for m in loaded if m.startswith("ray_accel.cli.") and m != "ray_accel.cli.status"] == [
        "ray_accel.cli.output",
        "ray_accel.cli.render",
    ]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_summary_is_the_commands_own(name: str) -> None:
    command = load_command(name)
    assert command.name == name
    assert short_help(name, 1000) == command.get_short_help_str(1000)
    assert short_help(name, 50) == command.get_short_help_str(50)


def test_an_unknown_command_is_a_usage_error_naming_it() -> None:
    with pytest.raises(click.UsageError, match="No such command 'stauts'"):
        cli.main(args=["stauts"], standalone_mode=False)
