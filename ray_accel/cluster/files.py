"""Reading and writing the small files of the state directory without being led
astray: a FIFO or device where a file should be would block a plain `open`
forever, a symbolic link would redirect a write, a huge file would be read
whole. Every read (`ray_accel.core.files.read_bytes`) is non-blocking, of a regular
file only, and bounded.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from ray_accel.core.files import UnreadableFile


def open_for_write(path: Path, mode: int = 0o600) -> int:
    """A fresh, truncated regular file at `path` opened for writing: never
    through a symbolic link (a world-writable state directory could hold one
    pointing anywhere), never a FIFO."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnreadableFile(f"{path} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_atomic(path: Path, text: str) -> Path:
    """Write `text` to `path` whole or not at all (a temporary file in the
    same directory, renamed over it), mode 0600."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def tail_lines(path: Path, count: int, limit: int = 16384) -> list[str]:
    """The last `count` non-blank lines of the last `limit` bytes of a log
    (empty if it cannot be read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return []
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return []
        raw = os.pread(fd, limit, max(0, st.st_size - limit))
    except OSError:
        return []
    finally:
        os.close(fd)
    return [ln for ln in raw.decode("utf-8", "replace").splitlines() if ln.strip()][-count:]
