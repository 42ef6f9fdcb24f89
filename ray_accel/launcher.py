"""`ray-accel start | stop | status`: one raylet per partition on this host.

Each raylet is an ordinary `ray start`, run through `ray_accel.raylet_launch`
so the bridge is installed where detection happens, with its mask in the
environment (a comma list: the only form Ray parses), its resources, its own
block of ports, and the labels ``ray-accel.io/partition=<agent>`` and
``ray-accel.io/accelerator-type``. Everything that can be checked is checked
before the first raylet starts; if one fails, those already started are
stopped, so a failed start leaves nothing behind.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from ray_accel import auth, procs, state
from ray_accel.bridge import BridgeSpec, BridgeUnsupported, check_ray_version, raylet_env
from ray_accel.errors import InputError, RayAccelError
from ray_accel.inventory import discover
from ray_accel.partition import PARTITION_LABEL, Partition, plan_partitions
from ray_accel.ports import AgentPorts, agent_ports, check_free, plan_ports
from ray_accel.raylet_launch import AGENT_ENV

TYPE_LABEL = "ray-accel.io/accelerator-type"
DEFAULT_GCS_PORT = 6379
# Flags ray-accel sets per partition; a user value would break the split.
RESERVED_FLAGS = {
    "--head", "--address", "--port", "--resources", "--num-gpus", "--labels", "--node-manager-port",
    "--object-manager-port", "--min-worker-port", "--max-worker-port", "--worker-port-list",
    "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
    "--metrics-export-port", "--ray-client-server-port", "--dashboard-port", "--block",
}  # fmt: skip

# Ray refuses these on a raylet that joins a cluster.
HEAD_ONLY_FLAGS = {"--include-dashboard", "--redis-shard-ports"}

Progress = Callable[[str], None]


@dataclass
class StartRequest:
    head: bool = False
    address: str | None = None
    mode: str = "auto-split"
    agents: int | None = None
    manual: str | None = None
    port: int | None = None
    port_base: int | None = None
    ray_args: list[str] = field(default_factory=list)
    backend: str | None = None
    timeout_s: float = 180.0
    metrics: bool = True


def _flag_names(args: Sequence[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in args if a.startswith("--")]


def _has_flag(args: Sequence[str], name: str) -> bool:
    return name in _flag_names(args)


def validate_ray_args(args: Sequence[str]) -> None:
    clash = [f for f in _flag_names(args) if f.replace("_", "-") in RESERVED_FLAGS]
    if clash:
        raise InputError(f"{clash[0]} is set per partition by ray-accel; remove it")


def running_record() -> dict[str, Any] | None:
    """The recorded node if any of its processes is still alive."""
    record = state.load()
    if record is None:
        return None
    if any(procs.alive(r) for p in record["partitions"] for rs in p.get("pids", {}).values() for r in rs):
        return record
    return None


def _ray_start_args(
    part: Partition, ports: AgentPorts, spec: BridgeSpec, head: bool, gcs: str | None, req: StartRequest, gcs_port: int
) -> list[str]:
    args = ["start"]
    args += ["--head", "--port", str(gcs_port)] if head else ["--address", str(gcs)]
    args += ports.ray_start_args(head)
    count = len(part.core_ids)
    if spec.resource_name == "GPU":
        args += ["--num-gpus", str(count)]
    else:
        args += ["--resources", json.dumps({spec.resource_name: count})]
    labels = {PARTITION_LABEL: part.agent_id}
    if spec.accelerator_type:
        labels[TYPE_LABEL] = spec.accelerator_type.replace(" ", "-")
    args += ["--labels", ",".join(f"{k}={v}" for k, v in labels.items())]
    agents = req.agents or 1
    if not _has_flag(req.ray_args, "--num-cpus"):
        # Every raylet would otherwise claim every CPU of the host.
        args += ["--num-cpus", str(max(1, (os.cpu_count() or 1) // max(1, agents)))]
    if not _has_flag(req.ray_args, "--object-store-memory"):
        share = int(psutil.virtual_memory().total * 0.3 / max(1, agents))
        args += ["--object-store-memory", str(max(100 * 1024**2, min(share, 2 * 1024**3)))]
    if head and not _has_flag(req.ray_args, "--include-dashboard"):
        args += ["--include-dashboard", "false"]
    if not _has_flag(req.ray_args, "--disable-usage-stats"):
        args.append("--disable-usage-stats")
    return args + (list(req.ray_args) if head else _without(req.ray_args, HEAD_ONLY_FLAGS))


def _without(args: Sequence[str], flags: set[str]) -> list[str]:
    """`args` less `flags` and their values (`--f v` or `--f=v`)."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in flags:
            skip = "=" not in a
            continue
        out.append(a)
    return out


def _raylet_base_env(cluster_auth: auth.Auth) -> dict[str, str]:
    """This process's environment with the cluster's auth, and the same auth
    applied here so our own GCS client and driver can reach the cluster."""
    auth.apply(cluster_auth)
    env = dict(os.environ)
    if cluster_auth.token_path is not None:
        env.pop(auth.TOKEN_ENV, None)  # raylets read the file, never an env value
    env.update(cluster_auth.env())
    return env


def _partition_env(base_env: dict[str, str], spec: BridgeSpec, part: Partition) -> dict[str, str]:
    """A partition raylet's environment: its mask (a comma list) and its name."""
    return {**base_env, spec.visible_ids_env: part.visible_ids, AGENT_ENV: part.agent_id}


def _launch(agent_id: str, args: list[str], env: dict[str, str], log_dir: Path, timeout_s: float) -> dict[str, Any]:
    result_path = log_dir / f"{agent_id}.result.json"
    result_path.unlink(missing_ok=True)
    log_path = log_dir / f"{agent_id}.log"
    cmd = [sys.executable, "-m", "ray_accel.raylet_launch", str(result_path), "--", *args]
    with open(log_path, "w") as log:
        try:
            subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            pass
    try:
        result: dict[str, Any] = json.loads(result_path.read_text())
    except (OSError, ValueError):
        result = {"ok": False, "error": f"no result within {timeout_s:g}s"}
    result["log"] = str(log_path)
    if not result.get("ok"):
        tail = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()][-3:]
        result["error"] = f"{result.get('error')}; log {log_path}: " + " | ".join(tail)
    return result


def _all_pids(parts: Sequence[dict[str, Any]]) -> list[list[float]]:
    return [r for p in parts for rs in p.get("pids", {}).values() for r in rs]


def record_auth(record: dict[str, Any]) -> auth.Auth:
    return auth.Auth.from_json(record.get("auth") or {})


def gcs_nodes(
    address: str, timeout_s: float = 5.0, cluster_auth: auth.Auth | None = None
) -> dict[str, dict[str, Any]] | None:
    """Node id -> {alive, total, available}, read from the GCS directly (no
    driver); None if the GCS does not answer within `timeout_s`."""
    out: dict[str, Any] = {}

    if cluster_auth is not None:
        auth.apply(cluster_auth)

    def query() -> None:
        try:
            _query()
        except Exception as e:
            out["__error__"] = e

    def _query() -> None:
        from ray._private.state import GlobalState
        from ray._raylet import GcsClientOptions

        gs = GlobalState()
        gs._initialize_global_state(
            GcsClientOptions.create(address, None, allow_cluster_id_nil=True, fetch_cluster_id_if_nil=False)
        )
        total = gs.total_resources_per_node()
        avail = gs.available_resources_per_node()
        for n in gs.node_table():
            nid = n["NodeID"]
            out[nid] = {
                "alive": bool(n["Alive"]),
                "total": total.get(nid, {}),
                "available": avail.get(nid, {}),
                "labels": n.get("Labels", {}),
            }
        out["__done__"] = True

    t = threading.Thread(target=query, daemon=True)
    t.start()
    t.join(timeout_s)
    out.pop("__error__", None)
    if not out.pop("__done__", False):
        return None
    return out


def _wait_registered(
    address: str, node_ids: Sequence[str], timeout_s: float, progress: Progress, cluster_auth: auth.Auth
) -> None:
    deadline = time.monotonic() + timeout_s
    seen = -1
    while time.monotonic() < deadline:
        nodes = gcs_nodes(address, cluster_auth=cluster_auth) or {}
        up = sum(1 for n in node_ids if nodes.get(n, {}).get("alive"))
        if up != seen:
            progress(f"registered {up}/{len(node_ids)} raylets")
            seen = up
        if up == len(node_ids):
            return
        time.sleep(0.3)
    raise RayAccelError(f"only {seen}/{len(node_ids)} raylets registered with {address} within {timeout_s:g}s")


def start(req: StartRequest, progress: Progress) -> dict[str, Any]:
    if req.head == bool(req.address):
        raise InputError("give exactly one of --head (start a cluster) or --address ADDR (join one)")
    validate_ray_args(req.ray_args)
    running = running_record()
    if running is not None:
        raise InputError(
            f"ray-accel partitions are already running on this node ({state.state_dir() / state.STATE_FILE}); "
            "run `ray-accel stop` first, or `ray-accel start --recover`"
        )
    plugin = discover(req.backend).require_primary()
    plan = plan_partitions(plugin.list_devices(), req.mode, req.agents, req.manual)
    req.agents = len(plan)
    spec = BridgeSpec.from_plugin(plugin)
    gcs_port = req.port or DEFAULT_GCS_PORT
    if req.head:
        check_free([gcs_port], "--port")
    ports = plan_ports(len(plan), req.port_base)
    if req.head and any(gcs_port in p.all() for p in ports):
        raise InputError(f"--port {gcs_port} falls inside the partitions' port blocks; choose another --port-base")
    # Last of the checks, so refused input never leaves a new token behind. A
    # head makes a token if there is none; a joining raylet must be given one.
    cluster_auth = auth.resolve(os.environ, state.state_dir(), create=req.head)
    if cluster_auth.warning:
        progress(f"warning: {cluster_auth.warning}")
    base_env = _raylet_base_env(cluster_auth)
    state.clear()  # a record whose processes are all gone is stale
    try:
        check_ray_version()
        base_env.update(raylet_env([spec], base_env))
    except BridgeUnsupported as e:
        progress(f"warning: {e}")

    log_dir = state.state_dir()
    record: dict[str, Any] = {
        "version": 1,
        "created": time.time(),
        "head": req.head,
        "mode": plan.mode.value,
        "spec": asdict(spec),
        "ray_args": req.ray_args,
        "gcs_address": req.address,
        "port_base": ports[0].base,
        "gcs_port": gcs_port if req.head else None,
        "auth": cluster_auth.to_json(),
        "partitions": [],
    }

    def launch(i: int, part: Partition, gcs: str | None) -> dict[str, Any]:
        env = _partition_env(base_env, spec, part)
        args = _ray_start_args(part, ports[i], spec, req.head and i == 0, gcs, req, gcs_port)
        progress(f"starting {part.agent_id}: {spec.visible_ids_env}={part.visible_ids}")
        result = _launch(part.agent_id, args, env, log_dir, req.timeout_s)
        entry = dict(part.to_json(), head=req.head and i == 0, ports=asdict(ports[i]), **result)
        return entry

    started: list[dict[str, Any]] = []
    try:
        first = 0
        if req.head:
            head = launch(0, plan[0], None)
            started.append(head)
            if not head.get("ok"):
                raise RayAccelError(f"head partition {plan[0].agent_id} failed: {head['error']}")
            record["gcs_address"] = head["gcs_address"]
            first = 1
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(plan) - first)) as pool:
            futures = [pool.submit(launch, i, plan[i], record["gcs_address"]) for i in range(first, len(plan))]
            for fut in futures:
                started.append(fut.result())
        failed = [p for p in started if not p.get("ok")]
        if failed:
            raise RayAccelError(f"partition {failed[0]['agent_id']} failed: {failed[0]['error']}")
        record["partitions"] = started
        state.save(record)
        _wait_registered(record["gcs_address"], [p["node_id"] for p in started], req.timeout_s, progress, cluster_auth)
    except BaseException:
        procs.terminate(_all_pids(started))
        state.clear()
        raise
    if req.metrics:
        _deploy_metrics(record, started, progress)
    return record


def _deploy_metrics(record: dict[str, Any], parts: Sequence[dict[str, Any]], progress: Progress) -> None:
    """Metrics are secondary: a failure here is reported, not fatal."""
    from ray_accel import exporter

    try:
        names = exporter.deploy(record["gcs_address"], parts)
        progress(f"metrics agents: {', '.join(names)}")
        record["metrics"] = True
    except Exception as e:
        progress(f"warning: metrics agents not started: {type(e).__name__}: {e}")
        record["metrics"] = False
    state.save(record)


def stop(grace_s: float = 5.0) -> dict[str, Any]:
    record = state.load()
    if record is None:
        return {"stopped": [], "pids": [], "message": "nothing to stop: no partitions recorded"}
    parts = record["partitions"]
    # Worker raylets first, the head (GCS) last, so no raylet sees its GCS vanish.
    ordered = [p for p in parts if not p.get("head")] + [p for p in parts if p.get("head")]
    signalled: list[int] = []
    for p in ordered:
        signalled += procs.terminate(_all_pids([p]), grace_s)
    if record.get("head"):
        _forget_cluster_address(record)
    state.clear()
    stopped = [p["agent_id"] for p in ordered]
    return {
        "stopped": stopped,
        "pids": signalled,
        "message": f"stopped {', '.join(stopped)} ({len(signalled)} processes)",
    }


def _flag_value(args: Sequence[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _forget_cluster_address(record: dict[str, Any]) -> None:
    """Remove Ray's "current cluster" file if it names the head we stopped, as
    `ray stop` does; a later plain `ray.init()` would try to join it."""
    from ray._common.utils import get_ray_address_file

    path = Path(get_ray_address_file(_flag_value(record.get("ray_args", []), "--temp-dir")))
    try:
        if path.read_text().strip() == record.get("gcs_address"):
            path.unlink()
    except OSError:
        pass


def _raylet_record(p: dict[str, Any]) -> list[float] | None:
    rs = p.get("pids", {}).get("raylet") or []
    return rs[0] if rs else None


def status() -> dict[str, Any]:
    record = state.load()
    if record is None:
        return {"running": False, "gcs_address": None, "gcs_alive": False, "auth": None, "env": {}, "partitions": []}
    address = record.get("gcs_address")
    gcs_pids = [r for p in record["partitions"] for r in p.get("pids", {}).get("gcs_server", [])]
    gcs_up = any(procs.alive(r) for r in gcs_pids) if gcs_pids else True
    cluster_auth = record_auth(record)
    nodes = gcs_nodes(address, 3.0, cluster_auth) if address and gcs_up else None
    resource = record["spec"]["resource_name"]
    out = []
    for p in record["partitions"]:
        raylet = _raylet_record(p)
        raylet_alive = raylet is not None and procs.alive(raylet)
        node = (nodes or {}).get(p.get("node_id", ""), {})
        total = node.get("total", {})
        avail = node.get("available", {})
        out.append(
            {
                "agent_id": p["agent_id"],
                "device_ids": p["device_ids"],
                "core_ids": p["core_ids"],
                "visible_ids": p["visible_ids"],
                "pid": int(raylet[0]) if raylet else None,
                "node_id": p.get("node_id"),
                "head": p.get("head", False),
                "alive": raylet_alive,
                "registered": node.get("alive") if nodes is not None else None,
                "in_use": {k: total[k] - avail.get(k, 0.0) for k in (resource, "CPU") if k in total},
                "total": {k: total[k] for k in (resource, "CPU") if k in total},
                "log": p.get("log"),
            }
        )
    return {
        "running": any(p["alive"] for p in out),
        "gcs_address": address,
        "gcs_alive": gcs_up,
        "auth": cluster_auth.to_json(),
        # Exactly what a driver needs in its environment (a path, never the token).
        "env": cluster_auth.env(),
        "partitions": out,
    }


def recover(progress: Progress, timeout_s: float = 180.0) -> dict[str, Any]:
    record = state.load()
    if record is None:
        raise InputError("nothing to recover: no partitions recorded (use `ray-accel start`)")
    gcs_pids = [r for p in record["partitions"] for r in p.get("pids", {}).get("gcs_server", [])]
    if gcs_pids and not any(procs.alive(r) for r in gcs_pids):
        raise RayAccelError(
            "the head's GCS is dead, so the cluster is gone: run `ray-accel stop`, then `ray-accel start`"
        )
    spec = BridgeSpec(**{**record["spec"], "unit_ids": tuple(record["spec"]["unit_ids"])})
    dead = [p for p in record["partitions"] if not procs.alive(_raylet_record(p) or [0, 0])]
    if not dead:
        progress("every partition is alive: nothing to recover")
        return record
    cluster_auth = record_auth(record)
    if cluster_auth.token_path is not None and not Path(cluster_auth.token_path).is_file():
        raise InputError(f"the cluster's token file {cluster_auth.token_path} is gone; cannot restart raylets")
    base_env = _raylet_base_env(cluster_auth)
    base_env.update(raylet_env([spec], base_env))
    req = StartRequest(address=record["gcs_address"], agents=len(record["partitions"]), ray_args=record["ray_args"])
    for p in dead:
        # The raylet's leftovers (agents, workers) go first: they hold its ports.
        keep = {k: v for k, v in p.get("pids", {}).items() if k not in ("gcs_server", "dashboard", "monitor")}
        procs.terminate([r for rs in keep.values() for r in rs])
        index = record["partitions"].index(p)
        ports = agent_ports(record["port_base"], index)
        check_free(
            [ports.named["node_manager_port"], ports.named["object_manager_port"]], f"recovering {p['agent_id']}"
        )
        part = Partition(p["agent_id"], tuple(p["device_ids"]), tuple(p["core_ids"]))
        env = _partition_env(base_env, spec, part)
        args = _ray_start_args(part, ports, spec, False, record["gcs_address"], req, 0)
        progress(f"restarting {part.agent_id}: {spec.visible_ids_env}={part.visible_ids}")
        result = _launch(part.agent_id, args, env, state.state_dir(), timeout_s)
        if not result.get("ok"):
            raise RayAccelError(f"partition {part.agent_id} did not restart: {result['error']}")
        # The head's GCS and dashboard stay as they were; the raylet is new.
        new_pids = dict(result["pids"])
        for k in ("gcs_server", "dashboard", "monitor"):
            if k in p.get("pids", {}):
                new_pids[k] = p["pids"][k]
        p.update({k: v for k, v in result.items() if k != "pids"}, pids=new_pids)
        state.save(record)
    _wait_registered(record["gcs_address"], [p["node_id"] for p in dead], timeout_s, progress, cluster_auth)
    if record.get("metrics"):
        _deploy_metrics(record, dead, progress)
    return record
