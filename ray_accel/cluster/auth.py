"""The cluster token: decided with the launch plan (which file, from where),
made before any raylet starts, and handed on by path.

Ray (2.52+) reads its token from, in order, ``RAY_AUTH_TOKEN`` (the value),
``RAY_AUTH_TOKEN_PATH`` (a file; unreadable or empty is fatal) and
``~/.ray/auth_token`` (docs.ray.io, "Token Authentication", token sources and
precedence). Ray 2.60 turns token auth on for a new head when ``RAY_AUTH_MODE``
is unset but generates a token only inside ``ray.init()``; ``ray start`` with no
token fails. So `start --head` makes sure a token exists (the user's, or a new
one from Ray's own generator in a 0600 file), and every raylet, driver and tool
of ours gets ``RAY_AUTH_MODE`` plus ``RAY_AUTH_TOKEN_PATH``: a path, never the
value, so the token appears in no environment listing, log or state record.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from ray_accel.core.errors import InputError
from ray_accel.core.files import open_for_write, read_bytes
from ray_accel.core.reader import LOCAL
from ray_accel.rayapi import auth as rayapi_auth
from ray_accel.rayapi.feature import RayApiMissing

MODE_ENV = "RAY_AUTH_MODE"
TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
MODES = ("token", "disabled")
# Where a token given by value is written so raylets can be handed a path.
STATE_TOKEN_FILE = "auth_token"
# Ray's tokens are 64 hex characters; anything past this is not a token file.
TOKEN_LIMIT = 64 * 1024
COPY, NEW = "copy", "new"  # a token file made from TOKEN_ENV's value, or a new token


class AuthError(InputError):
    """No usable token, or an auth mode ray-accel cannot honour."""


@dataclass(frozen=True)
class Auth:
    mode: str  # "token" or "disabled"
    token_path: str | None  # absolute; None when auth is disabled
    source: str  # where the token came from, for messages (never the token)
    # For this process only (neither recorded nor shown): what to say, and
    # what `provide` writes at token_path (COPY or NEW; None: it is there).
    warning: str | None = field(default=None, metadata=LOCAL)
    make: str | None = field(default=None, metadata=LOCAL)

    def env(self) -> dict[str, str]:
        """What a raylet or driver needs in its environment to reach the cluster."""
        out = {MODE_ENV: self.mode}
        if self.token_path is not None:
            out[TOKEN_PATH_ENV] = self.token_path
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Auth:
        mode = data.get("mode")
        path = data.get("token_path")
        if mode not in MODES or (path is not None and not isinstance(path, str)):
            raise AuthError(f"bad auth entry in the state record: mode {mode!r}, token_path {path!r}")
        return cls(str(mode), path, str(data.get("source", "state record")))


def default_token_path(home: Path | None = None) -> Path:
    """Ray's default token file (what `ray get-auth-token --generate` writes)."""
    return (home or Path.home()) / ".ray" / "auth_token"


def _readable_token(path: Path) -> bool:
    """A regular file holding something: never opened blocking (a FIFO there
    would hang `start`), never read past a size no token has."""
    try:
        return bool(read_bytes(path, TOKEN_LIMIT).strip())
    except OSError:
        return False


def _loose_mode_warning(path: Path) -> str | None:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None
    if mode & 0o077:
        return f"token file {path} is readable by other users (mode {mode:o}); chmod 600 it"
    return None


def write_token_file(path: Path, token: str) -> None:
    """Create `path` with mode 0600 from the first byte (never a wider window)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = open_for_write(path, new=True)
    with os.fdopen(fd, "w") as f:
        f.write(token)


def _new_token() -> str:
    try:
        return rayapi_auth.generate_token()
    except RayApiMissing:  # another Ray: the same 256 bits Ray 2.60 uses
        import secrets

        return secrets.token_hex(32)


def decide(environ: Mapping[str, str], state_dir: Path, create: bool, home: Path | None = None) -> Auth:
    """Which token this host should use, and whether `provide` must make its
    file (`create`: a new head may make one); reads, never writes.

    A token given by value is to be copied into a 0600 file in the state
    directory so that raylets and drivers can be given its path. Raises
    `AuthError` when no token can be had and `create` is False (a raylet
    joining a cluster).
    """
    raw_mode = environ.get(MODE_ENV)
    mode = (raw_mode or "token").strip().lower()
    if mode not in MODES:
        raise AuthError(f"{MODE_ENV}={raw_mode!r} is not supported by ray-accel: use 'token' or 'disabled'")
    if mode == "disabled":
        return Auth("disabled", None, f"{MODE_ENV}=disabled")
    if environ.get(TOKEN_ENV, "").strip():
        path = state_dir / STATE_TOKEN_FILE
        return Auth("token", str(path), f"{TOKEN_ENV} (copied to {path})", make=COPY)
    named = environ.get(TOKEN_PATH_ENV)
    path = Path(named).expanduser().absolute() if named else default_token_path(home)
    source = TOKEN_PATH_ENV if named else str(path)
    if _readable_token(path):
        return Auth("token", str(path), source, _loose_mode_warning(path))
    if named and (path.exists() or not create):
        raise AuthError(f"{TOKEN_PATH_ENV}={named!r}: no readable, non-empty token file there")
    if path.exists():
        raise AuthError(f"{path} exists but holds no readable token: fix or remove it")
    if not create:
        raise AuthError(
            f"no Ray cluster token on this host: set {TOKEN_PATH_ENV} to a copy of the head's token file "
            f"(or {TOKEN_ENV}), or place it at {path}; or set {MODE_ENV}=disabled if the cluster has auth off"
        )
    return Auth("token", str(path), f"generated at {source}", make=NEW)


def provide(auth: Auth, environ: Mapping[str, str]) -> Auth:
    """`auth` with the token file `decide` chose to make made (`environ`: the
    one it read): what raylets, drivers and the record are given."""
    if auth.make is None or auth.token_path is None:
        return auth
    path = Path(auth.token_path)
    if auth.make == COPY:
        path.unlink(missing_ok=True)
    write_token_file(path, environ[TOKEN_ENV].strip() if auth.make == COPY else _new_token())
    return replace(auth, make=None)


def ensure_local_token(environ: Mapping[str, str], home: Path | None = None) -> Path | None:
    """Before `ray.init()` starts a new local cluster: make Ray's default
    token file ourselves, mode 0600, when token auth is on (Ray 2.60's default
    for a new local cluster) and no token exists. Ray would otherwise generate
    it with the process umask, 0644 as a rule (`generate_and_save_token`,
    ray/_private/authentication/authentication_token_setup.py). Returns the
    file made, or None when nothing was needed."""
    mode = (environ.get(MODE_ENV) or "token").strip().lower()
    if mode != "token" or environ.get(TOKEN_ENV, "").strip() or environ.get(TOKEN_PATH_ENV):
        return None
    path = default_token_path(home)
    if path.exists():
        return None
    write_token_file(path, _new_token())
    return path


def apply(auth: Auth) -> None:
    """Make this process talk to the cluster with `auth`.

    Ray's C++ config reads the mode once and its token loader caches; both
    are refreshed, so our GCS client sends it.
    """
    wanted = auth.env()
    if all(os.environ.get(k) == v for k, v in wanted.items()) and (auth.token_path or TOKEN_ENV not in os.environ):
        return
    os.environ.update(wanted)
    if auth.token_path is not None:
        os.environ.pop(TOKEN_ENV, None)
    rayapi_auth.reload_token_config()


def raylet_base_env(cluster_auth: Auth) -> dict[str, str]:
    """This process's environment with the cluster's auth, and the same auth
    applied here so our own GCS client and driver can reach the cluster."""
    apply(cluster_auth)  # so this process's environment has the auth's own
    env = dict(os.environ)
    if cluster_auth.token_path is not None:
        env.pop(TOKEN_ENV, None)  # raylets read the file, never an env value
    return env
