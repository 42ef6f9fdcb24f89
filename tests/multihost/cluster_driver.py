"""Drivers for `test_cluster.py`, run inside a test host's namespace as
``python -m tests.multihost.cluster_driver MODE ADDRESS SPEC_JSON``; each
prints one JSON line (its last line of stdout).

``tasks``: SPEC is ``{"targets": [[host_label, partition], ...], "per_target": N,
"cores": [k, ...]}``. N tasks per target, each with ``label_selector`` naming the
partition AND the host, asking ``k`` NeuronCores (cycling through ``cores``);
each returns where it ran and which cores it saw.

``train``: SPEC is ``{"workers": [[host_label, partition], ...], "cores": k,
"steps": S, "out": DIR}``. A TorchTrainer (`AcceleratorTorchConfig`) with one
label selector per worker (grouped, so the bundle index is the world rank);
each worker writes ``DIR/rank<N>.json``.

``prometheus``: SPEC is ``{"devices": D, "hosts": H, "timeout": S}``. A real
Prometheus (`tests/prom.py`) inside this host scrapes every alive raylet's
metrics endpoint over the test network until it holds D device series and H
host series (or S seconds pass); prints its targets and the series of
``ray_accel_device_utilization`` and ``ray_accel_host_devices``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from ray_accel.partition.plan import HOST_LABEL, PARTITION_LABEL

RESOURCE = "neuron_cores"
MASK_ENV = "NEURON_RT_VISIBLE_CORES"
RANK_ENV = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "NEURON_RT_ROOT_COMM_ID",
    MASK_ENV,
)


def where() -> dict[str, Any]:
    import ray

    return {
        "ip": ray.util.get_node_ip_address(),
        "hostname": socket.gethostname(),
        "node_id": ray.get_runtime_context().get_node_id(),
        "pid": os.getpid(),
    }


def seen_task() -> dict[str, Any]:
    import ray

    ids = ray.get_runtime_context().get_accelerator_ids().get(RESOURCE, [])
    return {**where(), "visible": os.environ.get(MASK_ENV), "accelerator_ids": [str(i) for i in ids]}


def run_tasks(spec: dict[str, Any]) -> dict[str, Any]:
    import ray

    task = ray.remote(seen_task)
    refs: list[tuple[str, str, int, Any]] = []
    for host, partition in spec["targets"]:
        for i in range(spec["per_target"]):
            k = spec["cores"][i % len(spec["cores"])]
            ref = task.options(
                resources={RESOURCE: k}, label_selector={PARTITION_LABEL: partition, HOST_LABEL: host}
            ).remote()
            refs.append((host, partition, k, ref))
    got = ray.get([r for *_, r in refs], timeout=600)
    return {
        "driver_ip": ray.util.get_node_ip_address(),
        "results": [
            {"host": h, "partition": p, "asked": k, **seen} for (h, p, k, _), seen in zip(refs, got, strict=True)
        ],
    }


def train_loop(config: dict[str, Any]) -> None:
    import ray.train
    import torch

    from ray_accel.train import get_context, get_device, sync_gradients

    ctx = get_context()
    rc = ray.train.get_context()
    device = get_device()
    torch.manual_seed(0)  # the same start on every rank
    model = torch.nn.Linear(8, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1000 + ctx.world_rank)  # different data per rank
    w_true = torch.linspace(-1, 1, 8)
    losses = []
    for _ in range(config["steps"]):
        x = torch.randn(64, 8, generator=data)
        y = x @ w_true + 0.5
        opt.zero_grad()
        loss = ((model(x.to(device)).squeeze(-1) - y.to(device)) ** 2).mean()
        loss.backward()
        sync_gradients(model)
        opt.step()
        losses.append(float(loss.detach().cpu()))
    report = {
        **where(),
        "partition": ctx.partition,
        "backend": ctx.collective,
        "accel": {
            "world_rank": ctx.world_rank,
            "world_size": ctx.world_size,
            "local_rank": ctx.local_rank,
            "local_world_size": ctx.local_world_size,
            "node_rank": ctx.node_rank,
        },
        "ray": {
            "world_rank": rc.get_world_rank(),
            "world_size": rc.get_world_size(),
            "local_rank": rc.get_local_rank(),
            "local_world_size": rc.get_local_world_size(),
            "node_rank": rc.get_node_rank(),
        },
        "env": {k: os.environ.get(k) for k in RANK_ENV},
        "losses": losses,
        "weights": torch.cat([p.detach().cpu().flatten() for p in model.parameters()]).tolist(),
    }
    out = Path(config["out"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{ctx.world_rank}.json").write_text(json.dumps(report))


def run_train(spec: dict[str, Any]) -> dict[str, Any]:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from ray_accel.train import AcceleratorTorchConfig

    selectors = [{PARTITION_LABEL: p, HOST_LABEL: h} for h, p in spec["workers"]]
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"steps": spec["steps"], "out": spec["out"]},
        torch_config=AcceleratorTorchConfig(),
        scaling_config=ScalingConfig(
            num_workers=len(selectors),
            resources_per_worker={"CPU": 0, RESOURCE: spec["cores"]},
            label_selector=selectors,
        ),
        run_config=RunConfig(name=f"multihost-{os.getpid()}", storage_path=str(Path(spec["out"]) / "ray_results")),
    )
    trainer.fit()
    return {"ranks": sorted(p.name for p in Path(spec["out"]).glob("rank*.json"))}


def run_prometheus(spec: dict[str, Any]) -> dict[str, Any]:
    """Ray writes its Prometheus service-discovery file only from the head's
    dashboard, which this cluster does not run (two cores), so the file is
    written here with what Ray's writer would list: `<node IP>:<metrics export
    port>` of every alive node (`PrometheusServiceDiscoveryWriter`,
    ray/_private/metrics_agent.py, Ray 2.60)."""
    import tempfile
    import time

    import ray

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.prom import running_prometheus

    nodes = [n for n in ray.nodes() if n["Alive"]]
    targets = sorted(f"{n['NodeManagerAddress']}:{n['MetricsExportPort']}" for n in nodes)
    sd_file = Path(tempfile.mkdtemp(prefix="sd-")) / "prom_metrics_service_discovery.json"
    sd_file.write_text(json.dumps([{"labels": {"job": "ray"}, "targets": targets}]))
    with running_prometheus(sd_file, scrape_interval_s=1.0) as prom:
        prom.wait_for_targets(required=targets, timeout_s=60)
        deadline = time.monotonic() + spec["timeout"]
        while True:
            devices = prom.query("ray_accel_device_utilization")
            hosts = prom.query("ray_accel_host_devices")
            if (len(devices) >= spec["devices"] and len(hosts) >= spec["hosts"]) or time.monotonic() > deadline:
                break
            time.sleep(1)
    return {"targets": targets, "devices": [labels for labels, _ in devices], "hosts": hosts}


def main(mode: str, address: str, spec_json: str) -> None:
    import ray_accel

    ray_accel.init(address=address, logging_level="ERROR", log_to_driver=False)
    spec = json.loads(spec_json)
    modes = {"tasks": run_tasks, "train": run_train, "prometheus": run_prometheus}
    print(json.dumps(modes[mode](spec)), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
