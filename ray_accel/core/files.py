"""Bounded reads of small files that can never block, and the writes of
the state directory's files (whole or not at all, never through a link).

Sysfs attributes, spec files and similar inputs are read through here, so a
FIFO put where a file was expected (opening one for reading waits for a
writer forever), a device node (opening one can have side effects) or a huge
file cannot hang or exhaust a command. Only regular files are read, at most
`max_bytes` of them; everything else is refused with an `UnreadableFile`
whose message names the path and the reason.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

DEFAULT_MAX_BYTES = 64 * 1024

_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}


class UnreadableFile(OSError):
    """A path that is not a regular file of bounded size (or cannot be read).

    An `OSError`, so callers that already handle a missing or forbidden file
    handle these the same way; `errno` is set where the system gave one.
    """


def describe(error: OSError) -> str:
    """A short reason for a failed read, for warnings: 'permission denied', 'absent', ..."""
    if isinstance(error, UnreadableFile):
        return str(error.args[0]) if error.args else "unreadable"
    if error.errno == errno.ENOENT:
        return "absent"
    if error.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return error.strerror or type(error).__name__


def _regular(shown: str, mode: int) -> None:
    if stat.S_ISLNK(mode):
        raise UnreadableFile(f"{shown} is a symbolic link; refusing to follow it")
    if not stat.S_ISREG(mode):
        raise UnreadableFile(f"{shown} is {_KINDS.get(stat.S_IFMT(mode), 'not a regular file')}, not a regular file")


def read_bytes(path: str | os.PathLike[str], max_bytes: int = DEFAULT_MAX_BYTES, follow: bool = True) -> bytes:
    """The bytes of a regular file of at most `max_bytes` bytes.

    Raises `UnreadableFile` for anything that is not a regular file (checked
    before opening, and again on the open descriptor, so a file swapped for a
    FIFO in between is still refused) or that holds more than `max_bytes`;
    other `OSError`s (absent, permission denied) pass through unchanged.
    With `follow` False a symbolic link is refused too.
    """
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
    shown = os.fspath(path)
    if "\0" in shown:  # os.stat would raise ValueError, which no caller of a read expects
        raise UnreadableFile(f"{shown!r} holds a NUL byte, which no path may")
    _regular(shown, os.stat(path, follow_symlinks=follow).st_mode)
    # O_NONBLOCK: should the path become a FIFO after the stat, the open
    # returns at once instead of waiting for a writer.
    nofollow = 0 if follow else os.O_NOFOLLOW
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | nofollow)
    except OSError as e:
        if e.errno == errno.ELOOP:  # swapped for a link after the stat
            _regular(shown, stat.S_IFLNK)
        raise
    try:
        _regular(shown, os.fstat(fd).st_mode)
        chunks: list[bytes] = []
        left = max_bytes + 1  # one byte more tells "exactly the limit" from "over it"
        while left > 0 and (chunk := os.read(fd, min(left, 65536))):
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise UnreadableFile(f"{shown} holds more than {max_bytes} bytes")
    return data


def read_attribute(path: str, max_bytes: int) -> str:
    """A sysfs attribute's text, as `read_text` reads a file, in fewer calls
    to the kernel (a discovery reads a hundred of them): no device node lives
    in sysfs, so there is no `stat` before the open (which never blocks:
    O_NONBLOCK), the descriptor is checked as `read_bytes` checks it, and a
    read that returns less than it asked for is the whole file (sysfs hands
    an attribute over in one read; so does a regular file on a local disk)."""
    if "\0" in path:
        raise UnreadableFile(f"{path!r} holds a NUL byte, which no path may")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        _regular(path, os.fstat(fd).st_mode)
        chunks: list[bytes] = []
        left = max_bytes + 1  # one byte more tells "exactly the limit" from "over it"
        while left > 0:
            want = min(left, 65536)
            chunk = os.read(fd, want)
            chunks.append(chunk)
            left -= len(chunk)
            if len(chunk) < want:
                break  # less than asked for: the end of the file
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise UnreadableFile(f"{path} holds more than {max_bytes} bytes")
    return data.decode("utf-8", "replace")


def read_text(path: str | os.PathLike[str], max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """`read_bytes` decoded as UTF-8 (undecodable bytes replaced, never raised)."""
    return read_bytes(path, max_bytes).decode("utf-8", "replace")


def open_for_write(path: str | os.PathLike[str], mode: int = 0o600, new: bool = False) -> int:
    """A fresh, truncated regular file at `path` opened for writing: never
    through a symbolic link (a world-writable state directory could hold one
    pointing anywhere), never a FIFO. `new`: the file must not exist yet
    (`FileExistsError` otherwise, a link there included): for a file whose
    reader takes its presence as a sign, or that another user must not have
    placed beforehand."""
    how = os.O_EXCL if new else os.O_TRUNC
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | how | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
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
