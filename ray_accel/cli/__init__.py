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

import json
import sys
from collections.abc import Sequence

import click

from ray_accel import __version__
from ray_accel.cli.cluster import start, status_command, stop
from ray_accel.cli.health import health
from ray_accel.cli.host import devices, plan
from ray_accel.cli.jobs import jobs
from ray_accel.cli.repartition import repartition
from ray_accel.cli.top import top
from ray_accel.core.errors import InputError, RayAccelError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="ray-accel")
def cli() -> None:
    """Accelerator partitions for Ray."""


for command in (devices, plan, start, status_command, stop, repartition, top, jobs, health):
    cli.add_command(command)


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
