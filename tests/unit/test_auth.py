"""Where the cluster token comes from (Ray's own precedence), and that it is only ever a 0600 file."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from ray_accel.cluster import auth
from ray_accel.cluster.auth import Auth, AuthError, decide
from ray_accel.core.reader import dump
from ray_accel.rayapi import auth as rayapi_auth
from tests.badinput import badinput


def mode(path: str | Path) -> int:
    return stat.S_IMODE(Path(path).stat().st_mode)


def resolve(environ: dict[str, str], state_dir: Path, create: bool, home: Path) -> auth.Auth:
    """The decision, then its file made, as `start` does."""
    return auth.provide(auth.decide(environ, state_dir, create, home), environ)


def test_a_new_head_with_no_token_anywhere_generates_one_0600_at_rays_default_path(tmp_path: Path) -> None:
    home = tmp_path / "home"
    decided = auth.decide({}, tmp_path / "state", create=True, home=home)
    assert not home.exists() and decided.make == auth.NEW, "the decision writes nothing"
    got = resolve({}, tmp_path / "state", create=True, home=home)
    path = home / ".ray" / "auth_token"
    assert got.mode == "token" and got.token_path == str(path)
    assert mode(path) == 0o600 and mode(path.parent) == 0o700
    assert len(path.read_text()) == 64, "Ray's generator: 256 bits as hex"
    assert got.env() == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path)}
    again = resolve({}, tmp_path / "state", create=True, home=home)
    assert again.token_path == str(path) and path.read_text() == path.read_text(), "the existing token is reused"


@badinput("unnamed")
def test_a_joining_raylet_without_a_token_is_refused_naming_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(auth.AuthError, match="no Ray cluster token on this host: set RAY_AUTH_TOKEN_PATH"):
        auth.decide({}, tmp_path / "state", create=False, home=tmp_path / "home")
    assert not (tmp_path / "home").exists(), "nothing was written"


def test_a_token_given_by_value_is_handed_on_as_a_0600_file_never_as_a_value(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    got = resolve({"RAY_AUTH_TOKEN": "s3cret-value"}, state, create=False, home=tmp_path / "home")
    assert got.token_path == str(state / "auth_token")
    assert Path(got.token_path).read_text() == "s3cret-value" and mode(got.token_path) == 0o600
    assert "s3cret-value" not in repr(got) and "s3cret-value" not in str(dump(got)) + str(got.env())


def test_ray_precedence_value_then_path_then_default(tmp_path: Path) -> None:
    home = tmp_path / "home"
    default = home / ".ray" / "auth_token"
    auth.write_token_file(default, "from-default")
    named = tmp_path / "named"
    auth.write_token_file(named, "from-path")
    state = tmp_path / "state"
    state.mkdir()
    assert resolve({}, state, False, home).token_path == str(default)
    assert resolve({"RAY_AUTH_TOKEN_PATH": str(named)}, state, False, home).token_path == str(named)
    both = {"RAY_AUTH_TOKEN_PATH": str(named), "RAY_AUTH_TOKEN": "from-value"}
    assert Path(str(resolve(both, state, False, home).token_path)).read_text() == "from-value"


@badinput("unnamed")
def test_a_named_token_path_that_is_empty_is_an_error_as_in_ray(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("")
    with pytest.raises(auth.AuthError, match="no readable, non-empty token file"):
        resolve({"RAY_AUTH_TOKEN_PATH": str(empty)}, tmp_path, create=True, home=tmp_path / "home")


def test_a_named_missing_path_on_a_new_head_is_where_the_new_token_goes(tmp_path: Path) -> None:
    target = tmp_path / "tokens" / "cluster"
    got = resolve({"RAY_AUTH_TOKEN_PATH": str(target)}, tmp_path, create=True, home=tmp_path / "home")
    assert got.token_path == str(target) and mode(target) == 0o600


def test_disabled_is_honoured_and_writes_nothing(tmp_path: Path) -> None:
    got = resolve({"RAY_AUTH_MODE": "DISABLED"}, tmp_path / "state", create=True, home=tmp_path / "home")
    assert got.mode == "disabled" and got.token_path is None and got.env() == {"RAY_AUTH_MODE": "disabled"}
    assert not (tmp_path / "home").exists()


@pytest.mark.parametrize(
    "value", [pytest.param("k8s", marks=badinput("unnamed")), pytest.param("tokens", marks=badinput("unnamed")), ""]
)
def test_an_auth_mode_we_cannot_honour_is_refused_by_name(tmp_path: Path, value: str) -> None:
    if value == "":
        assert resolve({"RAY_AUTH_MODE": ""}, tmp_path, True, tmp_path / "h").mode == "token"
        return
    with pytest.raises(auth.AuthError, match=f"RAY_AUTH_MODE='{value}' is not supported"):
        resolve({"RAY_AUTH_MODE": value}, tmp_path, create=True, home=tmp_path / "home")


def test_a_loose_existing_token_file_gets_a_warning_not_a_silent_pass(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = home / ".ray" / "auth_token"
    path.parent.mkdir(parents=True)
    path.write_text("abc")
    path.chmod(0o644)
    got = resolve({}, tmp_path, create=True, home=home)
    assert got.warning is not None and "readable by other users (mode 644)" in got.warning


def test_state_record_round_trip_and_bad_entries(tmp_path: Path) -> None:
    got = resolve({}, tmp_path, create=True, home=tmp_path / "home")
    assert auth.Auth.from_json(dump(got)).env() == got.env()
    with pytest.raises(auth.AuthError, match="bad auth entry"):
        auth.Auth.from_json({"mode": "open"})


def test_a_new_local_cluster_gets_its_token_file_0600_before_ray_would_write_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    made = auth.ensure_local_token({}, home=home)
    path = home / ".ray" / "auth_token"
    assert made == path and mode(path) == 0o600 and len(path.read_text()) == 64
    token = path.read_text()
    assert auth.ensure_local_token({"RAY_AUTH_MODE": "token"}, home=home) is None and path.read_text() == token


@pytest.mark.parametrize(
    "environ",
    [{"RAY_AUTH_MODE": "disabled"}, {"RAY_AUTH_TOKEN": "t" * 64}, {"RAY_AUTH_TOKEN_PATH": "/elsewhere/token"}],
    ids=["disabled", "token-by-value", "token-path"],
)
def test_no_token_file_when_auth_is_off_or_the_token_is_given(tmp_path: Path, environ: dict[str, str]) -> None:
    assert auth.ensure_local_token(environ, home=tmp_path) is None
    assert not (tmp_path / ".ray").exists()


def test_a_default_token_file_that_holds_nothing_is_refused_naming_it(tmp_path: Path) -> None:
    token = tmp_path / ".ray" / "auth_token"
    token.parent.mkdir()
    token.write_text("  \n")
    with pytest.raises(AuthError, match=f"^{token} exists but holds no readable token: fix or remove it$"):
        decide({}, tmp_path / "state", create=True, home=tmp_path)


def test_an_auth_already_in_the_environment_is_not_applied_again(monkeypatch: pytest.MonkeyPatch) -> None:
    wanted = Auth("token", "/etc/ray/auth_token", "test")
    for k, v in wanted.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(rayapi_auth, "reload_token_config", lambda: pytest.fail("Ray's token config reloaded"))
    auth.apply(wanted)
