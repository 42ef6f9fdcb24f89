"""`ray-accel start --recover`: restart dead partitions with their recorded masks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray_accel.bridge.managers import BridgeSpec, raylet_env
from ray_accel.cluster import procs, state
from ray_accel.cluster.gcs import Progress, wait_registered
from ray_accel.cluster.ports import check_free, raylet_ports
from ray_accel.cluster.raylet import StartRequest, launch, partition_env, ray_start_args, raylet_base_env
from ray_accel.cluster.start import deploy_metrics
from ray_accel.cluster.status import gcs_records, raylet_record, record_auth
from ray_accel.core.errors import InputError, RayAccelError
from ray_accel.core.processes import ProcessRecord
from ray_accel.partition.plan import Partition

# A recovered raylet is new; the head's cluster-wide processes stay as they were.
HEAD_KINDS = ("gcs_server", "dashboard", "monitor")


def _alive(record: ProcessRecord | None) -> bool:
    return record is not None and record.alive()


def recover(progress: Progress, timeout_s: float = 180.0) -> dict[str, Any]:
    record = state.load()
    if record is None:
        raise InputError("nothing to recover: no partitions recorded (use `ray-accel start`)")
    gcs_pids = gcs_records(record)
    if gcs_pids and not any(r.alive() for r in gcs_pids):
        raise RayAccelError(
            "the head's GCS is dead, so the cluster is gone: run `ray-accel stop`, then `ray-accel start`"
        )
    spec = BridgeSpec.from_json(record["spec"])
    dead = [p for p in record["partitions"] if not _alive(raylet_record(p))]
    if not dead:
        progress("every partition is alive: nothing to recover")
        return record
    cluster_auth = record_auth(record)
    if cluster_auth.token_path is not None and not Path(cluster_auth.token_path).is_file():
        raise InputError(f"the cluster's token file {cluster_auth.token_path} is gone; cannot restart raylets")
    base_env = raylet_base_env(cluster_auth)
    base_env.update(raylet_env([spec], base_env))
    req = StartRequest(address=record["gcs_address"], partitions=len(record["partitions"]), ray_args=record["ray_args"])
    for p in dead:
        # The raylet's leftovers (Ray's agents, workers) go first: they hold its ports.
        procs.terminate(procs.partition_records(p, exclude=HEAD_KINDS))
        index = record["partitions"].index(p)
        ports = raylet_ports(record["port_base"], index)
        check_free(
            [ports.named["node_manager_port"], ports.named["object_manager_port"]], f"recovering {p['partition']}"
        )
        part = Partition(
            p["partition"],
            tuple(p["device_ids"]),
            tuple(p["core_ids"]),
            # A record from before types per partition: the node's type, as then.
            p["accelerator_type"] if "accelerator_type" in p else spec.accelerator_type,
            tuple(p.get("models", ())),
        )
        own = spec.for_partition(part)
        env = partition_env(base_env, own, part)
        args = ray_start_args(part, ports, own, False, record["gcs_address"], req, 0, p.get("labels"))
        progress(f"restarting {part.name}: {spec.visible_ids_env}={part.visible_ids}")
        result = launch(part.name, args, env, state.state_dir(), timeout_s)
        if not result.get("ok"):
            raise RayAccelError(f"partition {part.name} did not restart: {result['error']}")
        # The head's GCS and dashboard stay as they were; the raylet is new.
        new_pids = dict(result["pids"])
        for k in HEAD_KINDS:
            if k in p.get("pids", {}):
                new_pids[k] = p["pids"][k]
        p.update({k: v for k, v in result.items() if k != "pids"}, pids=new_pids)
        state.save(record)
    wait_registered(record["gcs_address"], [p["node_id"] for p in dead], timeout_s, progress, cluster_auth)
    if record.get("metrics"):
        deploy_metrics(record, dead, progress)
    return record
