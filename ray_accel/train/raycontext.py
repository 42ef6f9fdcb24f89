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
seam Ray 2.60 offers, found by feature (`ray_accel.rayapi.train`), never by
version string:
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
`on_training_start`. Where the job's workers share an IP and the seam is
missing, or Ray raises while its context is read or changed (reported with
the exception, apart from a missing seam), the run is refused; with one
raylet per IP Ray's ranks are already ours and nothing is touched.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from ray_accel.core.errors import RayAccelError
from ray_accel.rayapi import train as rayapi_train
from ray_accel.rayapi.feature import RayApiMissing

RANK_FIELDS = rayapi_train.RANK_FIELDS
# What Ray gets wrong on a shared IP; world rank and size it already gets right.
LOCAL_FIELDS = ("local_rank", "local_world_size", "node_rank")

AGREES = "agrees"  # Ray already says what we say
FIXED = "fixed"  # the seam was applied and the public API now agrees
PENDING = "pending"  # no Train context for this job in the worker yet
DIFFERS = "differs"  # Ray disagrees on the local ranks only: the seam can fix it
UNFIXABLE = "unfixable"  # Ray disagrees on the world rank, or the change did not take
MISSING = "missing"  # the seam is not in this Ray (feature missing)
FAILED = "failed"  # reading or changing Ray's context raised: the reason holds its type and message
REFUSING = (UNFIXABLE, MISSING, FAILED)


class RankSeamMissing(RayAccelError, RuntimeError):
    """Ray Train would report wrong local ranks and ray-accel cannot correct them."""


@dataclasses.dataclass(frozen=True)
class Alignment:
    """One worker's outcome of `align_in_worker`, returned through Ray: the
    verdict, what Ray's context reported, and why where it was not fixed."""

    status: str
    ray: Mapping[str, int] | None = None
    reason: str = ""


def shared_ips(ips: Sequence[str], raylets: Sequence[str]) -> dict[str, int]:
    """IPs that host more than one of the job's raylets, with how many each."""
    per_ip: dict[str, set[str]] = {}
    for ip, raylet in zip(ips, raylets, strict=True):
        per_ip.setdefault(ip, set()).add(raylet)
    return {ip: len(r) for ip, r in per_ip.items() if len(r) > 1}


def read_ray_ranks() -> dict[str, int] | None:
    """What `ray.train.get_context()` reports in this worker; None when the
    worker holds no Train context: V1 before its session returns defaults
    with a warning (ray/train/_internal/session.py:672-693), V2 raises
    RuntimeError until its context is set (`get_train_fn_utils`,
    ray/train/v2/_internal/execution/train_fn_utils.py:301-314, and
    `get_train_context`, execution/context.py:626-640). Any other exception
    reaches the caller."""
    import ray.train

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ctx = ray.train.get_context()
            got = {f: getattr(ctx, f"get_{f}")() for f in RANK_FIELDS}
    except RuntimeError:
        return None
    return got if all(isinstance(v, int) for v in got.values()) else None


def _raised(doing: str, e: BaseException) -> str:
    return f"{doing} raised {type(e).__name__}: {e}"


def judge(expected: Mapping[str, int], got: Mapping[str, int] | None) -> str:
    """Pure: AGREES, PENDING, DIFFERS (local ranks only), or UNFIXABLE when
    even the world rank differs (Ray owns world ranks; ours follow its order)."""
    if got is None or got["world_size"] != expected["world_size"]:
        return PENDING
    if got["world_rank"] != expected["world_rank"]:
        return UNFIXABLE
    return AGREES if all(got[k] == expected[k] for k in LOCAL_FIELDS) else DIFFERS


def align_in_worker(expected: Mapping[str, int]) -> Alignment:
    """Runs in a training worker: make `ray.train.get_context()` report
    `expected`, or say why not (MISSING: the seam is not there; FAILED: Ray
    raised while its context was read or changed, with the exception's type
    and message)."""
    try:
        got = read_ray_ranks()
    except Exception as e:
        return Alignment(FAILED, None, _raised("reading ray.train.get_context()", e))
    verdict = judge(expected, got)
    if verdict == UNFIXABLE:
        ours = f"ray-accel world rank {expected['world_rank']}"
        return Alignment(UNFIXABLE, got, f"Ray Train gave this worker world rank {got and got['world_rank']}, {ours}")
    if verdict != DIFFERS:
        return Alignment(verdict, got)
    try:
        rayapi_train.replace_worker_ranks({k: expected[k] for k in LOCAL_FIELDS})
    except RayApiMissing as e:
        return Alignment(MISSING, got, f"the seam is not there ({e})")
    except Exception as e:
        return Alignment(FAILED, got, _raised("changing Ray Train's worker context", e))
    try:
        after = read_ray_ranks()
    except Exception as e:
        return Alignment(FAILED, got, _raised("reading ray.train.get_context() after the change", e))
    if after is not None and all(after[k] == expected[k] for k in RANK_FIELDS):
        return Alignment(FIXED, after)
    return Alignment(UNFIXABLE, got, f"after the change ray.train.get_context() still reports {after}")


def set_controller_view(worker_group: Any, expected: Sequence[Mapping[str, int]]) -> Alignment:
    """Replace the local ranks in the controller's `Worker.distributed_context`
    objects (Ray's log line and state API read them): FIXED, or
    MISSING (a V1 worker group has no `get_workers`,
    ray/train/_internal/worker_group.py), UNFIXABLE (the controller's workers
    are not this job's ranks) or FAILED with the reason, touching nothing."""
    try:
        current = rayapi_train.controller_ranks(worker_group)
    except RayApiMissing as e:
        return Alignment(MISSING, None, f"the seam is not there ({e})")
    except Exception as e:
        return Alignment(FAILED, None, _raised("reading Ray Train's controller view", e))
    held = [c["world_rank"] for c in current]
    if held != [e["world_rank"] for e in expected]:
        return Alignment(UNFIXABLE, None, f"the controller holds world ranks {held} for {len(expected)} workers")
    try:
        rayapi_train.replace_controller_ranks(worker_group, [{k: e[k] for k in LOCAL_FIELDS} for e in expected])
    except Exception as e:
        return Alignment(FAILED, None, _raised("changing Ray Train's controller view", e))
    return Alignment(FIXED)


def refusal(outcomes: Sequence[Alignment], shared: Mapping[str, int], ray_version: str, at_start: bool) -> str | None:
    """Pure: the message to refuse the run with, or None.

    Only a job whose workers share an IP can get wrong ranks from Ray; there
    a worker that could not be corrected refuses the run, and so does one
    still PENDING when training starts (its Train context never held this
    job's ranks). An exception Ray raised is named as such, apart from a
    seam this Ray does not have."""
    bad = [o for o in outcomes if o.status in REFUSING or (at_start and o.status == PENDING)]
    if not shared or not bad:
        return None
    ip, n = next(iter(sorted(shared.items())))
    wrong = (
        f"Ray {ray_version}: Ray Train groups local ranks by node IP and {ip} hosts {n} of this job's "
        f"partitions (raylets), so ray.train.get_context() would report wrong local ranks, local world "
        "size and node rank"
    )
    if failed := [o for o in bad if o.status == FAILED]:
        return (
            f"{wrong}; ray-accel's correction failed: {failed[0].reason}. Refusing to train with wrong "
            "ranks: this is an error inside Ray Train's context, not a Ray version without the seam."
        )
    why = bad[0].reason or "ray.train.get_context() holds no ranks for this job when training starts"
    return (
        f"{wrong}; ray-accel could not correct them ({why}). Refusing to train with wrong ranks: "
        "use a tested Ray version or place at most one partition per host in this job."
    )
