"""Where this host's state record lives, reading and writing it, and the
host's lock.

The directory is ``RAYACCEL_STATE_DIR`` if set, used as it is (never
chmod-ed: it may be shared, e.g. a 1777 scratch directory; a warning says when
others can write to it), else ``~/.ray-accel/<host name>``, created 0700: a
home on NFS is shared by many hosts, and one host must never read another's
PIDs as its own dead processes. The record is written atomically, mode 0600,
and read back as untrusted input (`ray_accel.cluster.record`). Nothing here
creates the directory for a command that only reads (`status`, `top`).

`start`, `stop` and `start --recover` hold the host's lock (``flock`` on a file
in the directory) while they start or stop processes, never while waiting for
them; a second command exits 2 naming the lock instead of waiting.
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ray_accel.cluster.files import UnsafeFileError, read_bounded
from ray_accel.cluster.record import MAX_BYTES, NodeRecord, RecordError, dumps, parse_record
from ray_accel.core.errors import InputError

STATE_ENV = "RAYACCEL_STATE_DIR"
STATE_FILE = "node.json"
LOCK_FILE = "lock"
DEFAULT_ROOT = ".ray-accel"
_SAFE_HOST = re.compile(r"[^A-Za-z0-9._-]")

_warned: set[str] = set()


class StateError(InputError):
    """The state directory or file cannot be used."""


class LockError(InputError):
    """Another ray-accel command holds this host's lock."""


def warn(message: str) -> None:
    """A warning on stderr, once per process."""
    if message not in _warned:
        _warned.add(message)
        print(f"ray-accel: warning: {message}", file=sys.stderr, flush=True)


def host_name() -> str:
    """This host's name as a safe file name (a host name may hold anything)."""
    name = _SAFE_HOST.sub("_", socket.gethostname())[:255].lstrip(".")
    return name or "localhost"


def state_dir() -> Path:
    """The state directory's path (not created here)."""
    explicit = os.environ.get(STATE_ENV)
    if explicit:
        return Path(explicit)
    return Path.home() / DEFAULT_ROOT / host_name()


def state_file() -> Path:
    return state_dir() / STATE_FILE


def lock_file() -> Path:
    return state_dir() / LOCK_FILE


def _check_dir(path: Path) -> None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return
    except OSError as e:
        raise StateError(f"cannot use state directory {path}: {e}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise StateError(f"state directory {path} is not a directory")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        warn(
            f"state directory {path} is writable by other users (mode {mode:o}); "
            f"point {STATE_ENV} at a directory of your own"
        )


def ensure_state_dir() -> Path:
    """The state directory, created 0700 (with any missing parents) if new; an
    existing one is used as it is."""
    path = state_dir()
    missing = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    try:
        for new in reversed(missing):
            new.mkdir(mode=0o700, exist_ok=True)
    except OSError as e:
        raise StateError(f"cannot create state directory {path}: {e}") from None
    _check_dir(path)
    return path


def load() -> NodeRecord | None:
    """The record, None if there is none, or `RecordError` (exit 2) naming
    the file when it cannot be used."""
    directory = state_dir()
    _check_dir(directory)
    path = directory / STATE_FILE
    try:
        raw = read_bounded(path, MAX_BYTES, follow=False)
        st = path.lstat()
    except FileNotFoundError:
        _legacy_hint()
        return None
    except UnsafeFileError as e:
        raise RecordError(f"state file {path}: {e}") from None
    except OSError as e:
        raise StateError(f"cannot read state file {path}: {e}") from None
    if st.st_uid != os.geteuid():
        raise RecordError(f"state file {path} belongs to user {st.st_uid}, not to this user; it is not ours to act on")
    return parse_record(raw, str(path))


def _legacy_hint() -> None:
    if os.environ.get(STATE_ENV):
        return
    legacy = Path.home() / DEFAULT_ROOT / STATE_FILE
    if legacy.exists():
        warn(f"{legacy} is a record of an older ray-accel; records now live in {state_dir()}")


def check_host(record: NodeRecord, action: str) -> None:
    """A record made on another host names that host's PIDs: never act on them here."""
    here = host_name()
    if record.host != here:
        raise RecordError(
            f"state file {state_file()} was written on host {record.host!r}, this is {here!r}; "
            f"{action} acts only on this host's record (give each host its own {STATE_ENV})"
        )


def save(record: NodeRecord) -> Path:
    directory = ensure_state_dir()
    text = dumps(record)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".node.", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, directory / STATE_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return directory / STATE_FILE


def clear() -> None:
    try:
        (state_dir() / STATE_FILE).unlink(missing_ok=True)
    except OSError as e:
        raise StateError(f"cannot remove state file {state_dir() / STATE_FILE}: {e}") from None


@contextmanager
def host_lock(action: str) -> Iterator[Path]:
    """Hold this host's lock for `action`, or raise `LockError` at once."""
    path = ensure_state_dir() / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise StateError(f"cannot open lock file {path}: {e}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StateError(f"lock file {path} is not a regular file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another command"
            raise LockError(
                f"lock {path} is held ({holder}): another ray-accel start, stop or --recover is changing this "
                "host's partitions; run yours when it has finished"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{action}, pid {os.getpid()}".encode(), 0)
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
