"""Ray Serve's replicas as Ray sees them: the names Serve gives a replica's
actor and class, and the live actors of Ray's actor table (Ray 2.60:
`ray._private.state.state.actor_table`, the GCS's actor table as the
connected process's `GlobalState` reads it).

Serve 2.60 names each replica's actor `SERVE_REPLICA::<app>#<deployment>#<replica id>`
(`<deployment>#<replica id>` with no app) and its actor class
`ServeReplica:<app>:<deployment>`, which is also the replica process's title
(`ray::ServeReplica:<app>:<deployment>`): `ray/serve/_private/common.py`,
`ReplicaID.to_full_id_str` and `from_full_id_str`,
`DeploymentID.to_replica_actor_class_name`. A deployment's name may not hold
`#` (`ray/serve/deployment.py`, `_validate_name`). The rules are copied
here rather than imported (importing Serve costs its web stack, and a host
need not have it); `tests/unit/test_rayapi.py` holds them equal to the
installed Serve's. A name that does not follow them is no replica's
(`replica_name` says None): unknown, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

from ray_accel.rayapi.feature import attr, method, module, require_params

STATE = "ray._private.state"
REPLICA_NAME_PREFIX = "SERVE_REPLICA::"  # Serve's REPLICA_ID_FULL_ID_STR_PREFIX
REPLICA_CLASS_PREFIX = "ServeReplica:"  # DeploymentID.to_replica_actor_class_name
# A replica process's title, as Ray titles an actor's worker: `ray::` and its class.
REPLICA_TITLE_PREFIX = "ray::" + REPLICA_CLASS_PREFIX


@dataclass(frozen=True, kw_only=True)
class LiveActor:
    """One live actor of Ray's actor table: what is needed to tell a process's actor."""

    name: str  # "" for an unnamed actor
    class_name: str
    pid: int  # its worker's PID on its node; 0 where the table has none yet
    node_id: str  # hex


@dataclass(frozen=True, kw_only=True)
class ReplicaName:
    app: str  # "" for a replica without an app, as Serve writes it
    deployment: str
    replica_id: str


def live_actors() -> tuple[LiveActor, ...]:
    """Every live (`ALIVE`) actor of the cluster this process is connected to
    (a worker, or a driver after `ray.init`): one read of the GCS's actor table."""
    state = attr(module(STATE), "state", STATE)
    table = method(state, "actor_table", f"{STATE}.GlobalState")
    require_params(table, ("actor_id", "actor_state_name"), f"{STATE}.GlobalState.actor_table")
    rows = table(actor_id=None, actor_state_name="ALIVE")
    return tuple(
        LiveActor(
            name=str(row.get("Name") or ""),
            class_name=str(row.get("ActorClassName") or ""),
            pid=int(row.get("Pid") or 0),
            node_id=str((row.get("Address") or {}).get("NodeID") or ""),
        )
        for row in dict(rows).values()
    )


def replica_name(actor_name: str) -> ReplicaName | None:
    """The replica an actor's name names, by Serve's own rule
    (`ReplicaID.from_full_id_str`); None for any other name."""
    if not actor_name.startswith(REPLICA_NAME_PREFIX):
        return None
    parts = actor_name[len(REPLICA_NAME_PREFIX) :].split("#")
    if len(parts) == 2:
        parts.insert(0, "")
    if len(parts) != 3 or not all(parts[1:]):
        return None
    app, deployment, replica_id = parts
    return ReplicaName(app=app, deployment=deployment, replica_id=replica_id)


def is_replica_title(title: str) -> bool:
    """Whether a process's title is a Serve replica's (`ray::ServeReplica:<app>:<deployment>`)."""
    return title.startswith(REPLICA_TITLE_PREFIX)
