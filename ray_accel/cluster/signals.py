"""Signals while processes are being started or stopped: SIGTERM and SIGHUP
interrupt a start as Ctrl-C does (so its undo runs), and nothing interrupts
the undo itself."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import FrameType

Handler = Callable[[int, FrameType | None], None] | signal.Handlers


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP while processes are being started: handled as Ctrl-C."""


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


@contextmanager
def handled(sigs: tuple[signal.Signals, ...], handler: Handler) -> Iterator[None]:
    """`handler` for `sigs` while inside (in the main thread: signals go nowhere else)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, handler) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def interruptible() -> AbstractContextManager[None]:
    """SIGTERM and SIGHUP raise `Interrupted` in the main thread (as SIGINT
    raises KeyboardInterrupt), so the cleanup of a half-done start runs
    instead of the process dying with its raylets orphaned."""
    return handled((signal.SIGTERM, signal.SIGHUP), _raise)


def shielded() -> AbstractContextManager[None]:
    """No SIGINT, SIGTERM or SIGHUP while cleaning up: a second Ctrl-C must
    not leave the cleanup half-done."""
    return handled((signal.SIGINT, signal.SIGTERM, signal.SIGHUP), signal.SIG_IGN)
