"""What a training worker needs to know about its place, and the env it implies.

Backends extend `base_worker_env` with their collective's variables (NCCL,
PJRT); the training layer fills `RankInfo` per raylet, not per IP.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ray_accel.errors import InputError
from ray_accel.visibility import format_visible_ids


@dataclass(frozen=True)
class RankInfo:
    world_rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    master_addr: str
    master_port: int
    # Port for a collective's own rendezvous (Neuron's NEURON_RT_ROOT_COMM_ID);
    # None: the port after MASTER_PORT.
    comm_port: int | None = None

    @property
    def root_comm_port(self) -> int:
        return self.comm_port if self.comm_port is not None else self.master_port + 1

    def __post_init__(self) -> None:
        if not 0 <= self.world_rank < self.world_size:
            raise InputError(f"world rank {self.world_rank} outside world size {self.world_size}")
        if not 0 <= self.local_rank < self.local_world_size:
            raise InputError(f"local rank {self.local_rank} outside local world size {self.local_world_size}")
        if not 0 < self.master_port < 65536:
            raise InputError(f"bad master port {self.master_port}")


def base_worker_env(visible_ids_env: str | None, rank: RankInfo, visible_ids: Sequence[int]) -> dict[str, str]:
    """torchrun-style variables plus, when a variable is named, the shared, sorted mask."""
    env = {
        "RANK": str(rank.world_rank),
        "WORLD_SIZE": str(rank.world_size),
        "LOCAL_RANK": str(rank.local_rank),
        "LOCAL_WORLD_SIZE": str(rank.local_world_size),
        "NODE_RANK": str(rank.node_rank),
        "MASTER_ADDR": rank.master_addr,
        "MASTER_PORT": str(rank.master_port),
    }
    if visible_ids_env is not None:
        env[visible_ids_env] = format_visible_ids(visible_ids)
    return env
