"""Ports, auth and hook runs where the other tests do not reach: a port
outside the range or taken, no free block at all; a default token file that
holds nothing; an auth already applied; hooks that fail while a workload ends."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path

import pytest

from examples.hooks import Recording
from ray_accel.cluster import auth
from ray_accel.cluster import host as host_mod
from ray_accel.cluster.auth import Auth, AuthError, decide
from ray_accel.cluster.host import PortError, check_free, plan_ports, port_blocks
from ray_accel.hooks.config import LifecycleHook, Workload
from ray_accel.hooks.run import HookRun
from ray_accel.rayapi import auth as rayapi_auth


def test_a_port_outside_the_range_or_taken_is_refused_naming_it() -> None:
    with pytest.raises(PortError, match=r"^--port-base 80: port 80 is outside 1024\.\.65535$"):
        check_free([80], "--port-base 80")
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        taken = s.getsockname()[1]
        with pytest.raises(PortError, match=f"port {taken} is already in use"):
            check_free([taken], "x")


def test_a_given_base_is_used_when_free_and_without_any_free_block_the_user_is_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(host_mod, "is_free", lambda port, host="": True)
    assert plan_ports([2, 3], 30000) == port_blocks(30000, [2, 3], False)
    monkeypatch.setattr(host_mod, "is_free", lambda port, host="": False)
    with pytest.raises(PortError, match=r"no free block of \d+ ports found between 21000 and 65535; pass --port-base"):
        plan_ports([2], None)


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


class FailsBothWays(LifecycleHook):
    def pre_terminate(self) -> None:
        raise RuntimeError("device busy")

    def post_terminate(self) -> None:
        raise RuntimeError("cleanup failed")


def test_hooks_that_fail_while_a_workload_ends_are_logged_and_the_others_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("RAYACCEL_HOOK_DIR", str(tmp_path / "ledger"))
    log = tmp_path / "events"
    run = HookRun("r1", Workload("w1", "p0"), [Recording(str(log)), FailsBothWays])
    run.pre_create()
    with caplog.at_level(logging.WARNING, logger="ray_accel.hooks.run"):
        assert run.pre_terminate(5.0) is True, "a failure is an end, not a hang"
        run.post_terminate()
    assert "pre_terminate hook failed for w1" in caplog.text and "post_terminate hook failed for w1" in caplog.text
    assert [json.loads(x)["event"] for x in log.read_text().splitlines()] == [
        "pre_create",
        "pre_terminate",
        "post_terminate",
    ]
    assert list((tmp_path / "ledger").rglob("*.json")) == [], "the ledger entry is gone: nothing left to reconcile"
