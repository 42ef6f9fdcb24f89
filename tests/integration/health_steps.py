"""What the health tests do to a cluster and read back from it: faults
written into the mock's fault file (or a fake sysfs tree), the decider's
`health.json` read poll by poll (counted, never timed), the GCS asked
through ray-accel's seam, the host record read as `stop` reads it."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray_accel.cluster.auth import Auth, apply
from ray_accel.cluster.record import HostRecord, parse_record
from ray_accel.core.health import DeviceHealth
from ray_accel.core.health_state import HostHealth, PartitionHealth, read_health
from ray_accel.core.processes import ProcessRecord
from ray_accel.rayapi import gcs
from tests.gcs_drains import draining_nodes
from tests.integration.cluster_harness import Cluster


def write_faults(path: Path, data: dict[str, Any]) -> None:
    """The mock's fault file, replaced whole (a reader never sees half of it)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def health(cluster: Cluster) -> HostHealth:
    found = read_health(cluster.state_dir)
    assert found is not None, "the decider has written no health.json"
    return found


def device(h: HostHealth, device_id: str) -> DeviceHealth:
    found = next((d for d in h.devices if d.device_id == device_id), None)
    assert found is not None, f"no device {device_id} in health.json"
    return found


def part(h: HostHealth, name: str) -> PartitionHealth:
    found = h.partition(name)
    assert found is not None, f"no partition {name} in health.json"
    return found


def until_poll(cluster: Cluster, check: Callable[[HostHealth], bool], polls: int, timeout_s: float = 300) -> HostHealth:
    """The first `health.json` (read after every write) for which `check`
    holds, which must come within `polls` polls of the one now on disk;
    `timeout_s` only bounds a decider that stopped polling."""
    start = health(cluster).polls
    deadline = time.monotonic() + timeout_s
    seen = start
    while time.monotonic() < deadline:
        try:
            h = health(cluster)
        except Exception:  # written by rename: a reader sees the old or the new file, but say so if not
            time.sleep(0.05)
            continue
        if h.polls != seen:
            seen = h.polls
            if check(h):
                assert h.polls - start <= polls, f"it took {h.polls - start} polls, more than {polls}"
                return h
            if h.polls - start > polls:
                raise AssertionError(f"not so within {polls} polls: {h}")
        time.sleep(0.05)
    raise AssertionError(f"the decider made no poll for {timeout_s:g}s after poll {seen}")


def until(check: Callable[[], Any], timeout_s: float = 300, every_s: float = 0.2) -> Any:
    """For what a test waits on Ray for (a raylet registering, a fit ending)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g}s")
        time.sleep(every_s)


def record(cluster: Cluster) -> HostRecord:
    path = cluster.state_dir / "host.json"
    return parse_record(path.read_bytes(), str(path))


def gcs_view(cluster: Cluster) -> tuple[dict[str, gcs.GcsNode], dict[str, int]]:
    """Every node the cluster's GCS knows, and those it is draining (read
    through ray-accel's seam, as `ray drain-node`'s caller would)."""
    apply(Auth.from_json(cluster.status["auth"]))
    nodes = {n.node_id: n for n in gcs.read_nodes(cluster.address)}
    return nodes, draining_nodes(cluster.address)


def alive_node(cluster: Cluster, partition: str) -> gcs.GcsNode:
    nodes, _ = gcs_view(cluster)
    (found,) = [n for n in nodes.values() if n.alive and n.labels.get("ray-accel.io/partition") == partition]
    return found


def gone(processes: list[ProcessRecord]) -> bool:
    return not any(p.alive() for p in processes)


def ray_cli(cluster: Cluster, *args: str, timeout: float = 120) -> str:
    """Ray's own CLI (`ray list nodes`, `ray status`) with a driver's environment."""
    ray = str(Path(sys.executable).parent / "ray")
    proc = subprocess.run([ray, *args], env=cluster.driver_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def background_driver(cluster: Cluster, script: str, *args: str, log: Path) -> subprocess.Popen[str]:
    """A driver that outlives the call (killed by its PID at the end of the test)."""
    out = open(log, "w")
    return subprocess.Popen(
        [sys.executable, "-c", script, cluster.address, *args],
        env=cluster.driver_env(),
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
    )


def result_of(proc: subprocess.Popen[str], log: Path, timeout_s: float) -> Any:
    """A background driver's last JSON line, once it has ended."""
    proc.wait(timeout=timeout_s)
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    for line in reversed(text.strip().splitlines()):
        if line.startswith(("{", "[")):
            return json.loads(line)
    raise AssertionError(f"no result line: {text[-2000:]}")


# A fit whose first attempt waits (for a file never written) until a drain
# preempts it. argv: the GCS address, the output folder (its job id is written
# there at once), then a JSON object: "name"; "workers"; "resources" per
# worker; "partitions", one per worker, or null for any; "max_failures";
# "steps"; and "skip_if", true when a restarted attempt is to train and end
# (once the test writes OUT/moved).
WAITING_FIT = r"""
import json, sys
from pathlib import Path
import ray, ray_accel
from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from ray_accel.train import AcceleratorTorchConfig
from tests.integration.jobs_loops import wait_then_train

ray_accel.init(address=sys.argv[1], log_to_driver=False)
out, spec = Path(sys.argv[2]), json.loads(sys.argv[3])
config = AcceleratorTorchConfig()
(out / "job_id").write_text(config.run_id)
loop = {"out": str(out), "wait_for": str(out / "never"), "max_wait_s": 400, "steps": spec["steps"]}
if spec["skip_if"]:
    loop["skip_if"] = str(out / "moved")
trainer = TorchTrainer(
    wait_then_train,
    train_loop_config=loop,
    torch_config=config,
    scaling_config=ScalingConfig(num_workers=spec["workers"], resources_per_worker=spec["resources"],
                                 **({"label_selector": [{"ray-accel.io/partition": p} for p in spec["partitions"]]}
                                    if spec["partitions"] else {})),
    run_config=RunConfig(name=spec["name"], storage_path=str(out / "ray_results"),
                         failure_config=FailureConfig(max_failures=spec["max_failures"])),
)
try:
    trainer.fit()
    result = {"ok": True}
except Exception as e:
    result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
ray.shutdown()
print(json.dumps({**result, "id": config.run_id}))
"""


def waiting_fit(
    name: str, partitions: list[str] | int, resources: dict[str, float], max_failures: int, steps: int, skip_if: bool
) -> str:
    """WAITING_FIT's last argument; `partitions` is one per worker, or the number of workers placed anywhere."""
    placed = isinstance(partitions, list)
    spec = {"name": name, "workers": len(partitions) if placed else partitions, "resources": resources}
    return json.dumps(
        {
            **spec,
            "partitions": partitions if placed else None,
            "max_failures": max_failures,
            "steps": steps,
            "skip_if": skip_if,
        }
    )


def lock_is_free(state_dir: Path) -> bool:
    lock = state_dir / "lock"
    if not lock.exists():
        return True
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
