"""`ray-accel`: the command line (click, as Ray's own CLI).

Exit 0 on success, 2 for bad input (usage errors included), 1 for a run-time
failure, 130 on Ctrl-C. With --json an error is a JSON object on stderr
(`{"error": ..., "kind": ..., "exit_code": ...}`, and what the error adds as
`details`, e.g. every backend's state when none is active, and `warnings` when
the call used a deprecated spelling) with the same exit code, an unforeseen one
too (kind "internal", exit 1; without --json it is a traceback). With --json a
result's warnings are its document's `warnings` list, never a line of their own.
Options meant for `ray start` go after `--` and are never guessed at: a
mistyped ray-accel flag is an error, not a `ray start` option.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import click

from ray_accel import __version__
from ray_accel.core.errors import InputError, RayAccelError


@dataclass(frozen=True)
class Entry:
    """Where a command lives, and the line `ray-accel --help` shows for it."""

    module: str
    attribute: str
    summary: str  # the command's docstring summary (a unit test holds them equal)


# Each command's module is imported only when that command runs (or its own
# --help is asked for): `--version` and `--help` import none of them, and a
# command pays for its own path only.
COMMANDS: dict[str, Entry] = {
    "devices": Entry("ray_accel.cli.host", "devices", "List the accelerators of this host and every backend's state."),
    "plan": Entry(
        "ray_accel.cli.host",
        "plan",
        "Show how this host would be split into partitions, one raylet each, and each one's share of the host's "
        "CPUs and memory (as `start --head` would give them: the head raylet's share first, out of the host's).",
    ),
    "start": Entry("ray_accel.cli.cluster", "start", "Start one raylet per partition of this host."),
    "status": Entry(
        "ray_accel.cli.status",
        "status_command",
        "Show this host's partitions: masks, raylet PIDs, alive or dead, what is in use, and processes that hold "
        "their devices without being their workers.",
    ),
    "stop": Entry("ray_accel.cli.cluster", "stop", "Stop exactly the processes `start` started on this host, by PID."),
    "repartition": Entry(
        "ray_accel.cli.repartition",
        "repartition",
        "Split this host's devices anew, as `start` splits them: partitions whose devices stay as they are keep "
        "running; the others are drained through Ray, stopped, and started with their new devices.",
    ),
    "top": Entry("ray_accel.cli.top", "top", "Live view of every host's partitions, devices, workloads and orphans."),
    "jobs": Entry(
        "ray_accel.cli.jobs", "jobs", "Training jobs (every fit() with AcceleratorTorchConfig) and their phases."
    ),
    "health": Entry(
        "ray_accel.cli.health", "health", "Every device's health by its family's rule, and every partition's state."
    ),
}


def load_command(name: str) -> click.Command:
    """The click command `name`, its module imported now."""
    entry = COMMANDS[name]
    command = getattr(importlib.import_module(entry.module), entry.attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{entry.module}.{entry.attribute} is not a click command")
    return command


def short_help(name: str, limit: int) -> str:
    """What click shows of command `name`'s help in its group's list, from its summary alone."""
    return click.Command(name, help=COMMANDS[name].summary).get_short_help_str(limit)


class LazyGroup(click.Group):
    """A group whose commands are imported on first use (`COMMANDS`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return load_command(cmd_name) if cmd_name in COMMANDS else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click's own asks every command for its short help, importing them all.
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [(name, short_help(name, limit)) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="ray-accel")
def cli() -> None:
    """Accelerator partitions for Ray."""


def _fail(message: str, kind: str, code: int, as_json: bool, warnings: Sequence[str] = (), **details: object) -> int:
    if as_json:
        # The warnings held for the JSON document (a deprecated spelling) travel
        # inside it, so stderr stays one JSON object.
        held = {"warnings": list(warnings)} if warnings else {}
        print(json.dumps({"error": message, "kind": kind, "exit_code": code, **details, **held}), file=sys.stderr)
    else:
        print(f"ray-accel: {'error' if code == 2 else 'failed'}: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    ray_args: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, ray_args = args[:cut], args[cut + 1 :]
    as_json = "--json" in args
    if ray_args and "start" not in args:
        # Refused before the command runs: `stop -- x` must not stop anything first.
        return _fail(f"options after `--` are for `ray start` only: {' '.join(ray_args)}", "usage", 2, as_json)
    # Handed to the command as click's `obj`; `output.warn` holds its warnings here under --json.
    held: list[str] = []
    run = {"ray_args": ray_args, "as_json": as_json, "warnings": held}
    try:
        code = cli.main(args=args, prog_name="ray-accel", standalone_mode=False, obj=run)
    except click.UsageError as e:
        hint = f" (see `{e.ctx.command_path} --help`)" if e.ctx is not None else ""
        return _fail(e.format_message() + hint, "usage", 2, as_json, held)
    except click.ClickException as e:
        return _fail(e.format_message(), "usage", e.exit_code, as_json, held)
    except InputError as e:
        return _fail(str(e), "input", 2, as_json, held)
    except RayAccelError as e:
        return _fail(str(e), "failure", 1, as_json, held, **getattr(e, "details", {}))
    except (KeyboardInterrupt, click.Abort):
        return _fail("interrupted", "interrupted", 130, as_json, held)
    except Exception as e:
        if not as_json:
            raise  # a bug or an unforeseen failure: the traceback is what a report needs
        # A --json caller parses stderr: the object, never a traceback.
        return _fail(f"{type(e).__name__}: {e}", "internal", 1, as_json, held)
    return code if isinstance(code, int) else 0
