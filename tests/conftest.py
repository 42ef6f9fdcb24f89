from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from ray_accel.core import masks
from tests.cli_process import CliRunner


@pytest.fixture
def cli() -> CliRunner:
    """The CLI in this process (`tests.clirun`): as the console script, without its start-up."""
    from tests.clirun import run_cli_here

    return run_cli_here


RAY_TIER = ("ray", "multihost")


def pytest_configure(config: pytest.Config) -> None:
    """SIGINT raises KeyboardInterrupt even in a run started with it ignored
    (see `sigint_as_default`): .ci/pytest-tiers stops its runs with SIGINT,
    so that each tears down the clusters of the test it is in."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _shared_key(item: pytest.Item) -> str | None:
    from tests.clusters import SHARED_FIXTURES

    names = [SHARED_FIXTURES[n].name for n in getattr(item, "fixturenames", ()) if n in SHARED_FIXTURES]
    return names[0] if names else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """After pytest-randomly's shuffle, the tests that share a cluster run
    together (`tests.clusters.order`), so each shared cluster starts once."""
    from tests.clusters import order

    keys = [_shared_key(item) if any(item.get_closest_marker(m) for m in RAY_TIER) else None for item in items]
    items[:] = [items[i] for i in order(keys)]
    wanted = os.environ.get(SHARD_ENV)
    if wanted:
        _keep_shard(config, items, wanted)


# "K/N": this run is shard K (from 0) of N of the Ray tier (.ci/pytest-tiers
# runs them at once, each in a network namespace of its own); a test outside
# the tier is kept.
SHARD_ENV = "RAYACCEL_TEST_SHARD"


def _keep_shard(config: pytest.Config, items: list[pytest.Item], wanted: str) -> None:
    from tests.clusters import shard

    try:
        k, n = (int(x) for x in wanted.split("/"))
        if not 0 <= k < n:
            raise ValueError
    except ValueError:
        raise pytest.UsageError(f"{SHARD_ENV}={wanted!r}: expected K/N with 0 <= K < N") from None
    modules = {i.nodeid: i.nodeid.split("::")[0] for i in items if any(i.get_closest_marker(m) for m in RAY_TIER)}
    placed = shard(list(modules.values()), n)
    dropped = {i.nodeid for i in items if i.nodeid in modules and placed[modules[i.nodeid]] != k}
    config.hook.pytest_deselected(items=[i for i in items if i.nodeid in dropped])
    items[:] = [i for i in items if i.nodeid not in dropped]


@pytest.fixture(scope="session")
def shared_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The pool of shared clusters (`tests.clusters.SharedClusters`), stopped at the end."""
    from tests import clusters

    pool = clusters.SharedClusters(tmp_path_factory.mktemp("shared"))
    clusters.POOL = pool
    try:
        yield pool
    finally:
        clusters.POOL = None
        pool.release()
        clusters.STARTED.extend(pool.starts)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from tests import clusters

    if clusters.STARTED:
        terminalreporter.write_line(f"shared clusters started: {', '.join(clusters.STARTED)}")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A Ray-tier test that shares no cluster may start its own: the shared
    one is stopped first, before any of the test's fixtures (a module's own
    cluster too) are set up. Two clusters at once collide on worker ports."""
    from tests import clusters

    if clusters.POOL is not None and any(item.get_closest_marker(m) for m in RAY_TIER) and _shared_key(item) is None:
        clusters.POOL.release()


@pytest.fixture(scope="session")
def _pure_mask_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("masks")


@pytest.fixture(autouse=True)
def _no_inherited_seams(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    for k in list(os.environ):
        if k.startswith("RAYACCEL_"):
            monkeypatch.delenv(k)
    if not any(request.node.get_closest_marker(m) for m in ("ray", "multihost")):
        # Mask records are host-wide, like the vendor tools' process reports
        # they stand for: a pure test that publishes from the pytest process
        # (the bridge's set_visible does) would otherwise hold that device,
        # as an orphan, in the clusters of the Ray tier running beside it
        # (.ci/pytest-tiers). CI saw exactly that: pytest's PID holding
        # neuron:3 in test_metrics' cluster.
        monkeypatch.setenv(masks.MASK_DIR_ENV, str(request.getfixturevalue("_pure_mask_dir")))


# Per-example deadlines measure the machine, not the code, once the unit tier
# shares two cores with a running Ray cluster (make unit runs both at once:
# .ci/pytest-tiers).
settings.register_profile("ray-accel", deadline=None)
settings.load_profile("ray-accel")
