"""The node's partition record: what `ray-accel start` started, by PID.

Kept in a directory readable only by its owner (``RAYACCEL_STATE_DIR``,
default ``~/.ray-accel``), written atomically, so `stop`, `status` and
`start --recover` act on exactly the processes that were started.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ray_accel.core.errors import RayAccelError

STATE_ENV = "RAYACCEL_STATE_DIR"
STATE_FILE = "node.json"
# 2: processes recorded as [pid, kernel start ticks] (1 had wall-clock start times).
VERSION = 2


class StateError(RayAccelError):
    """The state directory or file cannot be used."""


def state_dir() -> Path:
    path = Path(os.environ.get(STATE_ENV) or Path.home() / ".ray-accel")
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path, 0o700)
    except OSError as e:
        raise StateError(f"cannot use state directory {path}: {e}") from None
    return path


def load() -> dict[str, Any] | None:
    path = state_dir() / STATE_FILE
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise StateError(f"cannot read {path}: {e}") from None
    return data


def save(data: dict[str, Any]) -> Path:
    directory = state_dir()
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".node.", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
        os.chmod(tmp, 0o600)
        os.replace(tmp, directory / STATE_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return directory / STATE_FILE


def clear() -> None:
    (state_dir() / STATE_FILE).unlink(missing_ok=True)
