"""What a raylet pushes to a connected driver never lands in a command's
stdout (its result, JSON under --json): Ray 2.60 prints those messages to
stdout whatever `log_to_driver` says (`listen_error_messages`). Seen in a
fresh-clone run: `status --json` began with "(raylet) WARNING: 4 PYTHON worker
processes have been started ...". Ray's own printer, called as Ray's error
listener calls it."""

from __future__ import annotations

import types
from collections.abc import Iterator

import pytest
import ray._private.worker as ray_worker

from ray_accel.rayapi import driver
from ray_accel.rayapi.feature import RayApiMissing

PUSHED = {
    "lines": ["WARNING: 4 PYTHON worker processes have been started on node: abc"],
    "pid": "raylet",
    "is_err": False,
}


@pytest.fixture
def restored() -> Iterator[None]:
    original = ray_worker.print_to_stdstream
    try:
        yield
    finally:
        ray_worker.print_to_stdstream = original


def test_rays_listener_prints_a_pushed_message_to_stdout_by_itself(
    restored: None, capsys: pytest.CaptureFixture[str]
) -> None:
    ray_worker.print_to_stdstream(dict(PUSHED), ignore_prefix=False)
    out, err = capsys.readouterr()
    assert "4 PYTHON worker processes" in out and err == "", "the behaviour this seam exists for"


def test_once_routed_a_pushed_message_goes_to_stderr_only(restored: None, capsys: pytest.CaptureFixture[str]) -> None:
    driver.pushed_messages_to_stderr()
    driver.pushed_messages_to_stderr()  # a second call wraps nothing twice
    ray_worker.print_to_stdstream(dict(PUSHED), ignore_prefix=False)
    out, err = capsys.readouterr()
    assert out == "" and err.count("4 PYTHON worker processes") == 1


def test_a_ray_without_the_printer_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver, "module", lambda name: types.SimpleNamespace())
    with pytest.raises(RayApiMissing, match="ray._private.worker has no print_to_stdstream"):
        driver.pushed_messages_to_stderr()
