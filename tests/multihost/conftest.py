"""The ``hosts`` fixture: ``hosts(n)`` gives n `Host` objects in network namespaces
(``hosts(n, hostname="ubuntu")``: all with that one host name).

Every set it made is closed when the test ends, passed, failed or interrupted
(and by an ``atexit`` guard if the process dies first); `tests.multihost.hosts`
documents the topology, identity and teardown. When the namespaces cannot be
made the test FAILS with the reason, it is never skipped.
``MULTIHOST_IP`` names another ``ip`` binary (default: ``ip`` on PATH).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.multihost.hosts import Host, HostSet


class Hosts:
    """Callable fixture value: ``hosts(n)``; ``hosts.close()`` tears down early, so a
    test can assert on what is left (``hosts.sets[i].leftovers()``)."""

    def __init__(self) -> None:
        self.sets: list[HostSet] = []

    def __call__(self, n: int, hostname: str | None = None) -> list[Host]:
        hs = HostSet(n, ip=os.environ.get("MULTIHOST_IP", "ip"), hostname=hostname)
        self.sets.append(hs)
        hs.start()  # HostSetupError propagates: the test fails with the reason
        return hs.hosts

    def close(self) -> None:
        errors = []
        for hs in reversed(self.sets):
            try:
                hs.close()
            except Exception as e:
                errors.append(str(e))
        assert not errors, "; ".join(errors)


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    made = Hosts()
    try:
        yield made
    finally:
        made.close()
