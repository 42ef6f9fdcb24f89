"""Ray Train's own context, made to say what ray-accel's ranks say.

Ray Train V2 (the default in Ray 2.60) groups a job's workers by node IP when
it computes local ranks (`WorkerGroup._assign_worker_ranks`,
ray/train/v2/_internal/execution/worker_group/worker_group.py:1041-1114, the
`node_ip` keys at 1094-1111). With two partitions (raylets) on one host,
`ray.train.get_context()` then says local ranks 0..3, local world size 4 and
node rank 0 for all four workers. V1 keys them on node id (ray#46163,
ray/train/_internal/backend_executor.py:394-479) and is right.

The ranks are computed once per (re)start, by `ranks.assign_ranks` (per
raylet); this module makes Ray's view agree with them through the narrowest
seam Ray 2.60 offers, found by feature, never by version string:
- in each worker, the process-global Train context's `distributed_context`
  (a frozen dataclass held by a non-frozen `TrainContext`,
  ray/train/v2/_internal/execution/context.py:91-98 and 123-126, reached with
  `get_train_context()`, 619-647) is replaced; `ray.train.get_context()` reads
  it (ray/train/v2/api/context.py:197-219); afterwards the public API is read
  again to check it;
- on the controller, each `Worker.distributed_context`
  (worker_group/worker.py:87-95) is replaced, which Ray's own log line and
  state API read.
A worker whose Train context does not exist yet (V1 runs `Backend.on_start`
before its session, backend_executor.py:227 vs 481-584) is checked again at
`on_training_start`. Where the seam is missing and the job's workers share
an IP, the run is refused; with one raylet per IP Ray's ranks are already
ours and nothing is touched.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from ray_accel.core.errors import RayAccelError

RANK_FIELDS = ("world_rank", "world_size", "local_rank", "local_world_size", "node_rank")
# What Ray gets wrong on a shared IP; world rank and size it already gets right.
LOCAL_FIELDS = ("local_rank", "local_world_size", "node_rank")

AGREES = "agrees"  # Ray already says what we say
FIXED = "fixed"  # the seam was applied and the public API now agrees
PENDING = "pending"  # no Train context for this job in the worker yet
UNFIXABLE = "unfixable"  # Ray disagrees and the seam is missing or did not take
DIFFERS = "differs"  # Ray disagrees on the local ranks only: the seam can fix it


class RankSeamMissing(RayAccelError, RuntimeError):
    """Ray Train would report wrong local ranks and ray-accel cannot correct them."""


def shared_ips(ips: Sequence[str], raylets: Sequence[str]) -> dict[str, int]:
    """IPs that host more than one of the job's raylets, with how many each."""
    per_ip: dict[str, set[str]] = {}
    for ip, raylet in zip(ips, raylets, strict=True):
        per_ip.setdefault(ip, set()).add(raylet)
    return {ip: len(r) for ip, r in per_ip.items() if len(r) > 1}


def read_ray_ranks() -> dict[str, int] | None:
    """What `ray.train.get_context()` reports in this worker; None when the
    worker holds no Train context (V1 before its session returns defaults
    with a warning, ray/train/_internal/session.py:672-693)."""
    try:
        import ray.train

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ctx = ray.train.get_context()
            got = {
                "world_rank": ctx.get_world_rank(),
                "world_size": ctx.get_world_size(),
                "local_rank": ctx.get_local_rank(),
                "local_world_size": ctx.get_local_world_size(),
                "node_rank": ctx.get_node_rank(),
            }
    except Exception:
        return None
    if not all(isinstance(v, int) for v in got.values()):
        return None
    return got


def _has_rank_fields(obj: Any) -> bool:
    return (
        obj is not None
        and dataclasses.is_dataclass(obj)
        and not isinstance(obj, type)
        and set(RANK_FIELDS) <= {f.name for f in dataclasses.fields(obj)}
    )


def replace_worker_context(expected: Mapping[str, int]) -> str | None:
    """Replace the local ranks in this worker's Train context; None when done,
    otherwise why the seam is not there."""
    try:
        from ray.train.v2._internal.execution.context import get_train_context
    except ImportError as e:
        return f"Ray Train's worker context is not where Ray 2.60 keeps it ({e})"
    try:
        context = get_train_context()
    except Exception as e:
        return f"Ray Train's worker context cannot be read ({type(e).__name__}: {e})"
    current: Any = getattr(context, "distributed_context", None)
    if not _has_rank_fields(current):
        return f"Ray Train's worker context holds no distributed_context with fields {', '.join(RANK_FIELDS)}"
    try:
        context.distributed_context = dataclasses.replace(current, **{k: expected[k] for k in LOCAL_FIELDS})
    except Exception as e:
        return f"Ray Train's worker context cannot be changed ({type(e).__name__}: {e})"
    return None


def judge(expected: Mapping[str, int], got: Mapping[str, int] | None) -> str:
    """Pure: AGREES, PENDING, DIFFERS (local ranks only), or UNFIXABLE when
    even the world rank differs (Ray owns world ranks; ours follow its order)."""
    if got is None or got["world_size"] != expected["world_size"]:
        return PENDING
    if got["world_rank"] != expected["world_rank"]:
        return UNFIXABLE
    if all(got[k] == expected[k] for k in LOCAL_FIELDS):
        return AGREES
    return DIFFERS


def align_in_worker(expected: Mapping[str, int]) -> dict[str, Any]:
    """Runs in a training worker: make `ray.train.get_context()` report
    `expected`, or say why not."""
    got = read_ray_ranks()
    verdict = judge(expected, got)
    if verdict == UNFIXABLE:
        return {
            "status": UNFIXABLE,
            "ray": got,
            "reason": f"Ray Train gave this worker world rank {got and got['world_rank']}, "
            f"ray-accel world rank {expected['world_rank']}",
        }
    if verdict != DIFFERS:
        return {"status": verdict, "ray": got}
    reason = replace_worker_context(expected)
    if reason is None:
        after = read_ray_ranks()
        if after is not None and all(after[k] == expected[k] for k in RANK_FIELDS):
            return {"status": FIXED, "ray": after, "was": got}
        reason = f"after the change ray.train.get_context() still reports {after}"
    return {"status": UNFIXABLE, "ray": got, "reason": reason}


def set_controller_view(worker_group: Any, expected: Sequence[Mapping[str, int]]) -> bool:
    """Replace the local ranks in the controller's `Worker.distributed_context`
    objects (Ray's log line and state API read them). False, touching nothing,
    when the worker group does not have them (a V1 worker group has no
    `get_workers`, ray/train/_internal/worker_group.py)."""
    get_workers = getattr(worker_group, "get_workers", None)
    if not callable(get_workers):
        return False
    workers = list(get_workers())
    if len(workers) != len(expected):
        return False
    contexts: list[Any] = [getattr(w, "distributed_context", None) for w in workers]
    if not all(_has_rank_fields(c) for c in contexts):
        return False
    if any(c.world_rank != e["world_rank"] for c, e in zip(contexts, expected, strict=True)):
        return False
    try:
        for w, c, e in zip(workers, contexts, expected, strict=True):
            w.distributed_context = dataclasses.replace(c, **{k: e[k] for k in LOCAL_FIELDS})
    except Exception:
        return False
    return True


def refusal(
    outcomes: Sequence[Mapping[str, Any]], shared: Mapping[str, int], ray_version: str, at_start: bool
) -> str | None:
    """Pure: the message to refuse the run with, or None.

    Only a job whose workers share an IP can get wrong ranks from Ray; there
    an UNFIXABLE worker refuses the run, and so does one still PENDING when
    training starts (its Train context never held this job's ranks)."""
    if not shared:
        return None
    bad = [o for o in outcomes if o["status"] == UNFIXABLE or (at_start and o["status"] == PENDING)]
    if not bad:
        return None
    ip, n = next(iter(sorted(shared.items())))
    why = bad[0].get("reason") or "ray.train.get_context() holds no ranks for this job when training starts"
    return (
        f"Ray {ray_version}: Ray Train groups local ranks by node IP and {ip} hosts {n} of this job's "
        f"partitions (raylets), so ray.train.get_context() would report wrong local ranks, local world "
        f"size and node rank; ray-accel could not correct them ({why}). Refusing to train with wrong ranks: "
        "use a tested Ray version or place at most one partition per host in this job."
    )
