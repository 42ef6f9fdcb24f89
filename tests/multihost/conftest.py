"""The ``hosts`` fixture: ``hosts(n)`` gives n `Host` objects in network namespaces
(``hosts(n, hostname="ubuntu")``: all with that one host name).

Every set it made is closed when the test ends, passed, failed or interrupted
(and by an ``atexit`` guard if the process dies first); `tests.multihost.hosts`
documents the topology, identity and teardown. When the namespaces cannot be
made the test FAILS with the reason, it is never skipped.
``MULTIHOST_IP`` names another ``ip`` binary (default: ``ip`` on PATH).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.multihost.hosts import Hosts


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    made = Hosts()
    try:
        yield made
    finally:
        made.close()
