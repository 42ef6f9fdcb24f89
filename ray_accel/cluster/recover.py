"""The restart of one partition's raylet (`relaunch`): on its recorded ports
and share, serving what its record says it serves (without the devices the
health decider took out), the one restart shared by `start --recover`, the
decider's shrink and return and a repartition (`ray_accel.hostops`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from ray_accel.bridge.managers import raylet_env
from ray_accel.cluster import procs
from ray_accel.cluster.auth import raylet_base_env
from ray_accel.cluster.host import Share, check_free, divide, read_host
from ray_accel.cluster.launcher import Launches
from ray_accel.cluster.raylet import RayletLaunch, RayOptions, user_figures
from ray_accel.cluster.record import HostRecord, PartitionEntry, RayProcess
from ray_accel.core.errors import RayAccelError
from ray_accel.core.numa import read_topology
from ray_accel.partition.plan import Partition
from ray_accel.rayapi.gcs import Progress


def relaunch(
    record: HostRecord,
    p: PartitionEntry,
    part: Partition,
    extra_labels: Mapping[str, str],
    launches: Launches,
    progress: Progress,
) -> PartitionEntry:
    """Start partition `p`'s raylet again, serving `part` (all of its devices,
    or some), on its recorded ports and share, with ray-accel's labels
    `extra_labels` (the user's come from the record), from this process's
    environment with the cluster's auth and the bridge; the new entry, with
    the new raylet's processes. The old raylet and its leftovers must be gone
    (its ports are checked)."""
    check_free([p.ports.named["node_manager_port"], p.ports.named["object_manager_port"]], f"restarting {p.name}")
    own = record.spec.for_partition(part)
    launch = RayletLaunch(
        part=part,
        ports=p.ports,
        spec=own,
        share=recorded_share(p, record),
        user=RayOptions.read(record.ray_args),
        labels={**dict(record.labels), **extra_labels},
        gcs=record.gcs_address,
        log_monitor=carries_log_monitor(record, p.name, lambda r: procs.check(r).ours),
    )
    base_env = raylet_base_env(record.auth)
    env = {**base_env, **raylet_env([record.spec], base_env)}
    progress(f"restarting {part.name}: {record.spec.visible_ids_env}={part.visible_ids}")
    (result,) = launches.run_all([launch.job(env)])
    if not result.ok:
        raise RayAccelError(f"partition {part.name} did not restart: {result.error}")
    return replace(
        p,
        processes=result.processes,
        node_id=result.node_id,
        node_ip=result.node_ip,
        log=result.log,
        labels=tuple(extra_labels.items()),
    )


def carries_log_monitor(record: HostRecord, name: str, alive: Callable[[RayProcess], bool]) -> bool:
    """Whether partition `name`'s new raylet is to run the host's log monitor:
    when no other raylet of the host runs one that is `alive`. One per host,
    as Ray asks (`ray start --help`, --include-log-monitor): its raylets
    share one logs folder, and each monitor would send every line again. The
    head raylet, which no host change touches, has it from the start; on a
    joining host the first partition has it, and where a change stops that
    one, the first raylet started after it takes it on."""
    others = [r for q in record.raylets() if q.name != name for r in q.of_kind("log_monitor")]
    return not any(alive(r) for r in others)


def terminate_raylet(p: PartitionEntry, checks: Mapping[RayProcess, procs.Check]) -> None:
    """Stop what is left of `p`'s raylet, ours only."""
    procs.terminate([r.record for r in p.processes if checks[r].ours])


def recorded_share(p: PartitionEntry, record: HostRecord) -> Share:
    """The share the partition was started with; a record from before shares
    were kept gets its part of the host by its units, as `start` divides it."""
    if p.share is not None:
        return p.share
    names = [q.name for q in record.partitions]
    weights = [len(q.core_ids) for q in record.partitions]
    host = read_host(user_figures(record.ray_args))
    return divide(names, weights, [() for _ in names], host, read_topology(), ()).shares[names.index(p.name)]
