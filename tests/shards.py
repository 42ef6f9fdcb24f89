"""The Ray tier in shards: which test modules run in which of N pytest runs.

The Ray tier spends much of its time waiting (raylets registering, Ray
Train's polls, processes exiting): on CI's two cores it keeps them about 40 %
busy. `.ci/pytest-tiers` therefore runs it as two shards at once, each in a
network namespace, HOME and TMPDIR of its own (so ports, Ray's session files,
state records and mask records never meet), and `--shard I/N` picks a
shard's tests.

A module is the unit: its module-scoped fixtures and clusters stay whole.
Modules that share a cluster (`tests.clusters.SHARED_FIXTURES`) stay in one
shard, so each shared cluster still starts once. Units are dealt out
heaviest first to the lightest shard, by the seconds a module took in a CI
run (`WEIGHTS`; a module not listed counts `DEFAULT_WEIGHT`): a balance, not a
promise, and a wrong figure only makes one shard finish later.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

# Seconds per module in one CI run of the Ray tier (2 cores, one shard).
WEIGHTS: Mapping[str, float] = {
    "tests/integration/test_health.py": 172,
    "tests/integration/test_jobs.py": 132,
    "tests/integration/test_train.py": 110,
    "tests/integration/test_lifecycle.py": 100,
    "tests/multihost/test_cluster.py": 78,
    "tests/integration/test_train_context.py": 74,
    "tests/integration/test_host_parity.py": 69,
    "tests/integration/test_torchneuron.py": 60,
    "tests/integration/test_launcher.py": 56,
    "tests/integration/test_metrics.py": 35,
    "tests/integration/test_honest_types.py": 34,
    "tests/integration/test_prometheus.py": 27,
    "tests/integration/test_auth.py": 25,
    "tests/multihost/test_hosts.py": 16,
}
DEFAULT_WEIGHT = 10.0


class ShardError(ValueError):
    """A `--shard` value that names no shard."""


def parse_shard(text: str) -> tuple[int, int]:
    """`I/N` (0 <= I < N) -> (I, N)."""
    index, sep, count = text.partition("/")
    if not (sep and index.isascii() and index.isdigit() and count.isascii() and count.isdigit()):
        raise ShardError(f"--shard {text!r}: expected I/N, such as 0/2")
    i, n = int(index), int(count)
    if not 0 <= i < n:
        raise ShardError(f"--shard {text!r}: I must be at least 0 and below N")
    return i, n


def assign(modules: Mapping[str, Hashable | None], shards: int) -> dict[str, int]:
    """Module -> shard. `modules`: each module with the shared cluster it
    uses (None: none). Modules of one cluster land together; then each unit,
    heaviest first (by name where equal), goes to the shard with the fewest
    seconds so far (the lowest index where equal)."""
    units: dict[Hashable, list[str]] = {}
    for module, key in sorted(modules.items()):
        units.setdefault(("cluster", key) if key is not None else ("module", module), []).append(module)
    load = [0.0] * shards
    out: dict[str, int] = {}
    weighted = sorted(units.values(), key=lambda ms: (-sum(WEIGHTS.get(m, DEFAULT_WEIGHT) for m in ms), ms))
    for members in weighted:
        shard = min(range(shards), key=lambda s: (load[s], s))
        load[shard] += sum(WEIGHTS.get(m, DEFAULT_WEIGHT) for m in members)
        out.update(dict.fromkeys(members, shard))
    return out


def module_keys(pairs: Sequence[tuple[str, Hashable | None]]) -> dict[str, Hashable | None]:
    """(module, key of one of its tests) pairs -> module -> its shared
    cluster: the first key any of its tests has (a module whose tests use
    two shared clusters ties them together in `assign` through the first)."""
    out: dict[str, Hashable | None] = {}
    for module, key in pairs:
        if out.get(module) is None:
            out[module] = key
    return out
