"""What a training worker needs to know about its place, as frozen values.

The training layer fills one `WorkerSlot` per worker (ranks per raylet, not
per IP; the ids Ray assigned to it) and hands the whole job to the backend's
`Runtime.worker_env`, which decides per family what each worker sees.
The only collective ray-accel itself names is gloo, torch's CPU collective,
which every worker can make; every other is a backend's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ray_accel.core.errors import InputError
from ray_accel.core.visibility import format_mask, mask_order

GLOO = "gloo"

# torchrun's variables: set by ray-accel from the ranks, never by a hook.
RANK_ENV_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")
RANK_ENV_VARS = frozenset(RANK_ENV_NAMES)


@dataclass(frozen=True)
class Rank:
    """A worker's ranks, per raylet (not per IP): computed once per start
    (`ray_accel.train.ranks.assign_ranks`), read by the runtimes, and carried
    by the worker's context and the job's replicas."""

    world_rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int

    def __post_init__(self) -> None:
        if not 0 <= self.world_rank < self.world_size:
            raise InputError(f"world rank {self.world_rank} outside world size {self.world_size}")
        if not 0 <= self.local_rank < self.local_world_size:
            raise InputError(f"local rank {self.local_rank} outside local world size {self.local_world_size}")


@dataclass(frozen=True, kw_only=True)
class WorkerSlot:
    """One training worker: its ranks, its raylet (node id), its own device
    ids and their accelerator type (as discovery named it for its raylet),
    and the job's rendezvous (rank 0's address and ports)."""

    rank: Rank
    node_id: str
    own_ids: tuple[str, ...]  # as Ray assigned them: core or GPU indexes, or UUIDs
    master_addr: str
    master_port: int
    # Port for a collective's own rendezvous (Neuron's NEURON_RT_ROOT_COMM_ID);
    # None: the port after MASTER_PORT.
    comm_port: int | None = None
    accelerator_type: str | None = None  # None: not known, or devices of several types

    @property
    def root_comm_port(self) -> int:
        return self.comm_port if self.comm_port is not None else self.master_port + 1

    def __post_init__(self) -> None:
        if not 0 < self.master_port < 65536:
            raise InputError(f"bad master port {self.master_port}")


@dataclass(frozen=True)
class CollectiveChoice:
    """What a worker's runtime chooses under backend="auto", and why where the
    choice is not the obvious one (a newer stack passed over, a fallback):
    logged in the worker and shown with the job. "" when there is nothing to say."""

    collective: str
    reason: str = ""


def rank_env(worker: WorkerSlot) -> dict[str, str]:
    rank = worker.rank
    values = {
        "RANK": rank.world_rank,
        "WORLD_SIZE": rank.world_size,
        "LOCAL_RANK": rank.local_rank,
        "LOCAL_WORLD_SIZE": rank.local_world_size,
        "NODE_RANK": rank.node_rank,
        "MASTER_ADDR": worker.master_addr,
        "MASTER_PORT": worker.master_port,
    }
    return {name: str(values[name]) for name in RANK_ENV_NAMES}


def raylet_union(worker: WorkerSlot, job: Sequence[WorkerSlot]) -> list[str]:
    """The ids of every worker on `worker`'s raylet, sorted as numbers where they
    are numbers (Ray sorts them as strings, so '10' would come before '2')."""
    return sorted({i for w in job if w.node_id == worker.node_id for i in w.own_ids}, key=mask_order)


def own_ids_env(visible_ids_env: str, worker: WorkerSlot) -> dict[str, str]:
    """Rank variables, and `worker` sees exactly its own devices: the safe rule
    for a family whose devices cannot be opened by two processes."""
    return {**rank_env(worker), visible_ids_env: format_mask(worker.own_ids)}


def check_collective(collective: str, accepted: Sequence[str], who: str) -> None:
    """Refuse a collective `who` cannot make, naming the ones it can."""
    if collective not in accepted:
        raise InputError(f"backend {collective!r} cannot be made by {who}: it makes {', '.join(accepted)}")


def first_own_index(visible_ids: Sequence[str], own_ids: Sequence[str]) -> int:
    """The position of a worker's first own id in the mask it sees (0 if it
    owns none): its device ordinal where the workers of a raylet share a mask."""
    return list(visible_ids).index(own_ids[0]) if own_ids else 0
