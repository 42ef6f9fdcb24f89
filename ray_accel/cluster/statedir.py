"""The state directory: where a host's record lives, its lock, reading and
writing the record there, and the table of every file the directory holds
(`FILES`: each with the module that owns it and its format). The record's
values, schema and parser are `ray_accel.cluster.record`'s.

A host is its name and the node IP its raylets use (`ray_accel.core.hosts`):
two hosts may share a name. The directory is ``RAYACCEL_STATE_DIR`` if set,
used as it is (never chmod-ed: it may be shared, e.g. a 1777 scratch
directory; a warning says when others can write to it), else
``~/.ray-accel/<host name>/<node IP>``, created 0700: a home on NFS is shared
by many hosts, and one host must never read another's PIDs as its own dead
processes. The record is ``host.json``, written atomically, mode 0600, and
read back as untrusted input. Nothing here creates a directory for a command
that only reads (`status`, `top`).

`start` knows its node IP (`ray_accel.cluster.host.node_ip`) and writes
there. The commands that act on a record without starting raylets (`stop`,
`status`, `start --recover`, `top`, `jobs`) find it (`locate`): the record
under this host's name whose IP is one of this host's addresses now. A record
for an address this host does not have is another host of the same name
sharing the home, or this host before its address changed: it is never acted
on, and the commands name it (`RAYACCEL_STATE_DIR=<its directory>` acts on
it, with a warning, for the second case).

An earlier ray-accel wrote ``node.json`` in ``~/.ray-accel/<host name>`` (or
in ``RAYACCEL_STATE_DIR``), without the IP. Where this host has no record of
its own, that file is read, with a warning: `status` shows it, `stop` stops
what it names and removes it, `start` refuses while it names running
partitions (and removes it when they are all gone), `start --recover` refuses.

`start`, `stop` and `start --recover` hold the directory's lock (``flock`` on
a file in it) while they start or stop processes, never while waiting for
them; a second command exits 2 naming the lock instead of waiting.

The small files of the state directory are read and written without being
led astray: a FIFO or device where a file should be would block a plain
`open` forever, a symbolic link would redirect a write, a huge file would be
read whole. Every read (`ray_accel.core.files.read_bytes`) is non-blocking, of
a regular file only, and bounded; every write goes through
`ray_accel.core.files` (`write_atomic`, `open_for_write`).
"""

from __future__ import annotations

import fcntl
import functools
import os
import re
import socket
import stat
import sys
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from ray_accel.cluster.host import local_addresses
from ray_accel.cluster.record import MAX_BYTES, HostRecord, RecordError, dumps, parse_record
from ray_accel.core.errors import InputError
from ray_accel.core.files import UnreadableFile, describe, read_bytes, write_atomic
from ray_accel.core.hosts import ip_text

STATE_ENV = "RAYACCEL_STATE_DIR"
STATE_FILE = "host.json"
LEGACY_FILE = "node.json"  # an earlier ray-accel's record (no node IP)
LOCK_FILE = "lock"
DEFAULT_ROOT = ".ray-accel"
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")
# Where a name in `FILES` holds this, each partition (the head raylet's
# included, as "head") has its own file.
PARTITION = "<partition>"


@dataclass(frozen=True)
class StateFile:
    """One kind of file in a host's state directory: its name (with
    `PARTITION` where there is one per partition), the module that owns it
    (names it; it writes it too unless `format` names the writer) and what
    it holds."""

    name: str
    owner: str
    format: str


# Every file a host's state directory holds. The owners below `cluster`
# (`core`) and above it (`health`, `hostops`) define their names themselves,
# as the layers require; tests/unit/test_statedir.py holds each name here to
# the owner's. Writes go through `ray_accel.core.files`: `write_atomic`
# (whole or not at all, via a temporary `.<name>.<random>.tmp` beside the
# file, mode 0600) or `open_for_write` (never through a link, never a FIFO).
FILES: Mapping[str, StateFile] = MappingProxyType(
    {
        f.name: f
        for f in (
            StateFile(
                name=STATE_FILE,
                owner="ray_accel.cluster.statedir",
                format="JSON: the host record, current version (`ray_accel.cluster.record`); written atomically",
            ),
            StateFile(
                name=LEGACY_FILE,
                owner="ray_accel.cluster.statedir",
                format="JSON: an earlier ray-accel's record, version 3, without the node IP; read, marked "
                "stopping in its own version by `stop`, then removed",
            ),
            StateFile(
                name=LOCK_FILE,
                owner="ray_accel.cluster.statedir",
                format="flock(2) lock of `start`, `stop` and `start --recover`; its text names the holder "
                "(`<action>, pid <pid>`)",
            ),
            StateFile(
                name="auth_token",
                owner="ray_accel.cluster.auth",
                format="text: the cluster token given by value (RAY_AUTH_TOKEN), copied there so raylets and "
                "drivers get a path; mode 0600, created new; never printed",
            ),
            StateFile(
                name="devices.json",
                owner="ray_accel.core.health_kept",
                format="JSON: the devices out of service and in doubt, kept across restarts; written atomically "
                "by the decider and `health clear`",
            ),
            StateFile(
                name="health.json",
                owner="ray_accel.core.health_state",
                format="JSON: the health decider's view of the host (devices, partitions, polls); written "
                "atomically by the decider",
            ),
            StateFile(
                name="readings.json",
                owner="ray_accel.plugins.host_readings",
                format="JSON: the host-level readings the decider took last, for the metrics exporter; written "
                "atomically by the decider",
            ),
            StateFile(
                name="health-requests",
                owner="ray_accel.health.requests",
                format="folder of `clear-<ns>-<hex>.json` requests (JSON) of `health clear` to the decider, "
                "each written atomically, removed when taken",
            ),
            StateFile(
                name="decider.log",
                owner="ray_accel.health.launch",
                format="text: the health decider's stdout and stderr",
            ),
            StateFile(
                name="repartition.log",
                owner="ray_accel.hostops.repartition",
                format="text: a repartition helper's stdout and stderr",
            ),
            StateFile(
                name="repartition.json",
                owner="ray_accel.hostops.repartition",
                format='JSON: `{"ok": true}` once a repartition helper finished its change; written atomically',
            ),
            StateFile(
                name="launch-server.log",
                owner="ray_accel.cluster.launch_server",
                format="text: the output of the launch server that forks a start's launchers (its own, not "
                "theirs: each launch has its log)",
            ),
            StateFile(
                name=f"{PARTITION}.log",
                owner="ray_accel.cluster.launcher",
                format="text: the output of the launch of the partition's raylet (`ray start`)",
            ),
            StateFile(
                name=f"{PARTITION}.result.json",
                owner="ray_accel.cluster.launcher",
                format="JSON: the launch's report (ok, error, the processes Ray started), created new by the "
                "launcher process (`ray_accel.cluster.raylet_launch`)",
            ),
            StateFile(
                name=f"{PARTITION}.leader.json",
                owner="ray_accel.cluster.raylet",
                format="JSON: the launcher's pid and start ticks (the leader of the raylet's process group), "
                "created new by the launcher process (`ray_accel.cluster.raylet_launch`)",
            ),
        )
    }
)


class StateError(InputError):
    """The state directory or file cannot be used."""


class LockError(InputError):
    """Another ray-accel command holds this host's lock."""


@functools.cache
def warn(message: str) -> None:
    """A warning on stderr, once per process."""
    print(f"ray-accel: warning: {message}", file=sys.stderr, flush=True)


def host_name() -> str:
    """This host's name as one safe file name (a host name may hold anything)."""
    return _SAFE_NAME.sub("_", socket.gethostname())[:255].lstrip(".") or "localhost"


@dataclass(frozen=True)
class Place:
    """One host's state directory and its record file in it (`host.json`, or
    an earlier version's `node.json`); `explicit` when RAYACCEL_STATE_DIR
    named the directory."""

    directory: Path
    file: Path
    explicit: bool

    @property
    def legacy(self) -> bool:
        return self.file.name == LEGACY_FILE


@dataclass(frozen=True)
class Found:
    """What `locate` found: this host's record (None: there is none), and the
    records under this host's name for addresses it does not have."""

    place: Place | None
    elsewhere: tuple[Path, ...] = ()

    def note(self) -> str | None:
        """What to tell a user who has no record here but whose home holds
        records of this host's name for other addresses."""
        if self.place is not None or not self.elsewhere:
            return None
        files = ", ".join(str(p) for p in self.elsewhere)
        return (
            f"no record for this host's addresses, but {files} holds a record of host {host_name()!r} for another "
            "address: another host of that name shares this home, or this host's address changed since `start` "
            f"(then `{STATE_ENV}=<its directory> ray-accel stop` stops what it names)"
        )


def home_root() -> Path:
    """The default layout's directory of this host's name: one directory per node IP in it."""
    return Path.home() / DEFAULT_ROOT / host_name()


def search_root() -> Path:
    """Where this host's records are looked for: RAYACCEL_STATE_DIR, or its name's directory."""
    explicit = os.environ.get(STATE_ENV)
    return Path(explicit) if explicit else home_root()


def place_for(ip: str | None) -> Place:
    """Where the record of this host at node IP `ip` lives (`ip` None: an
    earlier version's record, by name alone). An IP's directory is named as
    the host label writes the IP (`ip_text`: one text per address, and a safe
    file name)."""
    explicit = bool(os.environ.get(STATE_ENV))
    name = STATE_FILE if ip is not None else LEGACY_FILE
    if explicit or ip is None:
        directory = search_root()
    else:
        directory = home_root() / ip_text(ip)
    return Place(directory, directory / name, explicit)


def place_of(record: HostRecord) -> Place:
    """Where `record` is kept: its own IP's place (an earlier version's record: its own file)."""
    return place_for(record.host_ip)


def choose(recorded: Sequence[str], local: Collection[str]) -> tuple[list[str], list[str]]:
    """The IP directories (by name) holding a record, split into this host's
    (their IP is one of its addresses now: `local`, as `ip_text` names them) and the
    others, each sorted."""
    wanted = set(local)
    mine = sorted(d for d in recorded if d in wanted)
    return mine, sorted(d for d in recorded if d not in wanted)


def _exists(path: Path) -> bool:
    """Whether `path` is there (a FIFO or link is reported when read, not
    skipped); a folder that may not be read is a `StateError` naming it, not
    an empty one."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise StateError(f"cannot read state directory {path.parent}: {describe(e)}") from None
    return True


def candidates() -> tuple[list[Place], tuple[Path, ...]]:
    """The places holding a record of this host (this version's first), and
    the record files under its name for addresses it does not have."""
    explicit = os.environ.get(STATE_ENV)
    if explicit:
        directory = Path(explicit)
        _check_dir(directory)
        places = [Place(directory, directory / n, True) for n in (STATE_FILE, LEGACY_FILE) if _exists(directory / n)]
        return places, ()
    root = home_root()
    _check_dir(root)
    try:
        recorded = [d.name for d in root.iterdir() if d.is_dir() and not d.is_symlink() and _exists(d / STATE_FILE)]
    except FileNotFoundError:
        recorded = []
    except OSError as e:
        raise StateError(f"cannot read state directory {root}: {e}") from None
    mine, others = choose(recorded, {ip_text(a) for a in local_addresses()})
    places = [Place(root / d, root / d / STATE_FILE, False) for d in mine]
    if _exists(root / LEGACY_FILE):
        places.append(Place(root, root / LEGACY_FILE, False))
    return places, tuple(root / d / STATE_FILE for d in others)


def locate() -> Found:
    """This host's record, if any (see the module doc: by the addresses its
    interfaces have now). Records for two of this host's addresses is a
    `StateError` naming them."""
    places, elsewhere = candidates()
    current = [p for p in places if not p.legacy]
    if len(current) > 1:
        names = ", ".join(str(p.file) for p in current)
        raise StateError(
            f"this host has records for several of its addresses ({names}); point {STATE_ENV} at the directory "
            "of the one to act on"
        )
    legacy = Path.home() / DEFAULT_ROOT / LEGACY_FILE
    if not places and legacy.exists():
        warn(f"{legacy} is a record of an older ray-accel; records now live in {home_root()}/<node IP>")
    return Found(places[0] if places else None, elsewhere)


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


def ensure_dir(place: Place) -> Path:
    """The place's directory, created 0700 (with any missing parents) if new;
    an existing one is used as it is."""
    path = place.directory
    try:
        for new in [*reversed(path.parents), path]:
            if not new.exists():
                new.mkdir(mode=0o700, exist_ok=True)
    except OSError as e:
        raise StateError(f"cannot create state directory {path}: {e}") from None
    _check_dir(path)
    return path


def load(place: Place) -> HostRecord | None:
    """The record at `place`, None if there is none, or `RecordError` (exit
    2) naming the file when it cannot be used."""
    _check_dir(place.directory)
    path = place.file
    try:
        raw = read_bytes(path, MAX_BYTES, follow=False)
        st = path.lstat()
    except FileNotFoundError:
        return None
    except UnreadableFile as e:
        raise RecordError(f"state file {path}: {e}") from None
    except OSError as e:
        raise StateError(f"cannot read state file {path}: {e}") from None
    if st.st_uid != os.geteuid():
        raise RecordError(f"state file {path} belongs to user {st.st_uid}, not to this user; it is not ours to act on")
    record = parse_record(raw, str(path))
    if record.legacy != place.legacy:
        kind = "an earlier version's (no host_ip)" if record.legacy else "of this version"
        raise RecordError(f"state file {path} holds a record {kind}; {place.file.name} holds the other kind")
    if not place.explicit and record.host_ip is not None and ip_text(record.host_ip) != place.directory.name:
        raise RecordError(
            f"state file {path} names node IP {record.host_ip}, not the IP of its directory; "
            "it was copied there: it is not this host's record"
        )
    return record


def check_host(record: HostRecord, place: Place, action: str) -> list[str]:
    """Refuse a record written on another host (its PIDs are that host's);
    the warnings to give for one that is this host's with a caveat: an earlier
    version's (name only), or, where RAYACCEL_STATE_DIR names it, one for an
    address this host no longer has."""
    here = host_name()
    if record.host != here:
        raise RecordError(
            f"state file {place.file} was written on host {record.host!r}, this is {here!r}; "
            f"{action} acts only on this host's record (give each host its own {STATE_ENV})"
        )
    if record.host_ip is None:
        return [
            f"state file {place.file} is an earlier ray-accel's record, which named this host by its name "
            f"alone; {action} uses it (after `ray-accel stop`, `start` writes {STATE_FILE})"
        ]
    if record.host_ip not in local_addresses():
        return [
            f"state file {place.file} was written for node IP {record.host_ip}, which is not an address of this "
            f"host now: its address changed since `start`, or another host named {here!r} uses {STATE_ENV} "
            f"{place.directory} too; {action} uses it because {STATE_ENV} names its directory"
        ]
    return []


def save(record: HostRecord) -> HostRecord:
    """Write `record` to its place; the record, for a caller that goes on with it."""
    place = place_of(record)
    ensure_dir(place)
    write_atomic(place.file, dumps(record))
    return record


def clear(place: Place) -> None:
    try:
        place.file.unlink(missing_ok=True)
    except OSError as e:
        raise StateError(f"cannot remove state file {place.file}: {e}") from None


@contextmanager
def host_lock(action: str, place: Place) -> Iterator[Path]:
    """Hold the lock of `place`'s directory for `action`, or raise `LockError` at once."""
    ensure_dir(place)
    path = place.directory / LOCK_FILE
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
