"""Which Ray Serve replica a workload is: its app, deployment and replica id.

A replica's process title names its app and deployment
(`ray::ServeReplica:<app>:<deployment>`) but not its replica id, which only
its actor's name in Ray's actor table carries
(`SERVE_REPLICA::<app>#<deployment>#<id>`; both rules in
`ray_accel.rayapi.serve`). So collection marks a replica by its title
(`from_title`), and the exporter then asks the actor table for the replicas
it has not identified yet (`ReplicaIds`): a replica's id never changes
while its process lives, so the table is read once per new replica process
(and again, less and less often, for one it could not find), never once
per interval. The actor is matched by its PID on the exporter's own raylet
(its node id): PIDs repeat across hosts, never on one host at one time.

A replica that could not be identified is still a workload: what is not
known is None, and its `unknown` says which field and why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TypedDict

from ray_accel.rayapi.serve import REPLICA_TITLE_PREFIX, LiveActor, is_replica_title, replica_name

log = logging.getLogger(__name__)

# After a lookup that did not find a replica, the next one for it waits this
# long, then twice as long each time, up to RETRY_MAX_S: a replica's actor is
# in the table once its creation task returned, moments after its title
# changed, so the first retry is soon; one never found costs little.
RETRY_FIRST_S = 5.0
RETRY_MAX_S = 60.0
NOT_LOOKED_UP = "not looked up in Ray's actor table yet"


@dataclass(frozen=True, kw_only=True)
class ServeReplica:
    """A workload as a Serve replica; a field that is not known is None, and
    `unknown` names it with the reason."""

    app: str | None
    deployment: str | None
    replica_id: str | None
    unknown: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


def from_title(title: str) -> ServeReplica | None:
    """What a process title says of a replica (None: not a replica's): its app
    and deployment where the title splits into exactly those two, never its id."""
    if not is_replica_title(title):
        return None
    rest = title.split(" ")[0][len(REPLICA_TITLE_PREFIX) :]
    parts = rest.split(":")
    # Ray may add the running method (`.method`) to an actor's title; a name
    # with `:` or `.` in it cannot then be told from it.
    if len(parts) == 2 and all(parts) and "." not in parts[1]:
        return ServeReplica(app=parts[0], deployment=parts[1], replica_id=None, unknown={"replica_id": NOT_LOOKED_UP})
    why = f"the process title {rest!r} does not split into app and deployment"
    unknown = {"app": why, "deployment": why, "replica_id": NOT_LOOKED_UP}
    return ServeReplica(app=None, deployment=None, replica_id=None, unknown=unknown)


def still_unknown(seen: ServeReplica, why: str) -> ServeReplica:
    """`seen` (from its title), its replica id unknown for `why`."""
    return replace(seen, unknown={**seen.unknown, "replica_id": why})


def identify(pending: Mapping[int, ServeReplica], actors: Iterable[LiveActor], node_id: str) -> dict[int, ServeReplica]:
    """Each of `pending` (PID -> what its title says) as the actor table
    (`actors`) names it: by its live actor with that PID on raylet
    `node_id`; where there is none, or its name is not a replica's, what the
    title says, with why the rest is unknown."""
    mine = {a.pid: a for a in actors if a.node_id == node_id and a.pid}
    out = {}
    for pid, seen in pending.items():
        actor = mine.get(pid)
        named = replica_name(actor.name) if actor is not None else None
        if named is not None:
            out[pid] = ServeReplica(app=named.app, deployment=named.deployment, replica_id=named.replica_id)
        elif actor is None:
            out[pid] = still_unknown(seen, "Ray's actor table has no live actor with this PID on this raylet")
        else:
            out[pid] = still_unknown(seen, f"its actor's name {actor.name!r} is not a Serve replica's")
    return out


@dataclass
class _Miss:
    """A replica the last lookup did not identify: as it was shown, and when to look again."""

    shown: ServeReplica
    at: float
    wait: float


class ReplicaIds:
    """One exporter's replica ids, kept from one sample to the next: `identify`
    reads the actor table (`read`) only when a replica process it has not
    identified appeared, or a retry for one it missed is due."""

    def __init__(self, node_id: str, read: Callable[[], Sequence[LiveActor]]) -> None:
        self.node_id, self.read = node_id, read
        self.known: dict[int, ServeReplica] = {}
        self.missed: dict[int, _Miss] = {}
        self.lookups = 0  # how many times the table was read
        self.failed: str | None = None  # why the last read failed

    def identify(self, seen: Mapping[int, ServeReplica], now: float) -> tuple[dict[int, ServeReplica], list[str]]:
        """Each replica process of a sample (`seen`: PID -> what its title says)
        as far as it is known, and the errors to report: an actor table that
        could not be read (also in each replica's `unknown`)."""
        # Only live replica processes are remembered.
        self.known = {pid: r for pid, r in self.known.items() if pid in seen}
        self.missed = {pid: m for pid, m in self.missed.items() if pid in seen}
        pending = {pid: r for pid, r in seen.items() if pid not in self.known}
        due = any(pid not in self.missed or now >= self.missed[pid].at + self.missed[pid].wait for pid in pending)
        errors: list[str] = []
        if due:
            self.lookups += 1
            try:
                actors = self.read()
            except Exception as e:  # the GCS is a source like any other: reported, never fatal here
                why = f"Ray's actor table could not be read: {type(e).__name__}: {e}"
                errors.append(f"serve replica ids unknown: {why}")
                if why != self.failed:  # logged when it starts failing, as collection's sources
                    log.warning("ray-accel metrics: serve replica ids unknown: %s", why)
                self.failed = why
                found = {pid: still_unknown(r, why) for pid, r in pending.items()}
            else:
                self.failed = None
                found = identify(pending, actors, self.node_id)
            for pid, r in found.items():
                if r.replica_id is not None:
                    self.known[pid] = r
                    self.missed.pop(pid, None)
                else:
                    last = self.missed.get(pid)
                    wait = RETRY_FIRST_S if last is None else min(RETRY_MAX_S, 2 * last.wait)
                    self.missed[pid] = _Miss(r, now, wait)
        shown = {**{pid: m.shown for pid, m in self.missed.items()}, **self.known}
        return shown, errors


class ReplicaFields(TypedDict):
    """A workload's Serve fields in a snapshot's and `top`'s JSON (`replica_fields`)."""

    kind: str
    app: str | None
    deployment: str | None
    replica_id: str | None
    unknown: dict[str, str]


def replica_fields(serve: ServeReplica | None) -> ReplicaFields:
    """A workload's fields in a snapshot's and `top`'s JSON: `kind`
    (`serve_replica` or `ray_worker`), `app`, `deployment`, `replica_id`
    (None for a worker that is not a replica, or where unknown) and
    `unknown` (field -> why it is unknown; empty when all are known)."""
    if serve is None:
        return ReplicaFields(kind="ray_worker", app=None, deployment=None, replica_id=None, unknown={})
    return ReplicaFields(
        kind="serve_replica",
        app=serve.app,
        deployment=serve.deployment,
        replica_id=serve.replica_id,
        unknown=dict(serve.unknown),
    )
