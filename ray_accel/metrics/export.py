"""Export per-partition samples into Ray's own metrics (`ray.util.metrics`).

One `PartitionExporter` actor per partition (named so it cannot be confused
with Ray's own metrics agent), pinned to that partition's raylet by
its label, samples only that partition's devices and the process trees of
that raylet's workers, and sets Ray gauges; the raylet's metrics agent serves
them on Ray's Prometheus endpoint next to Ray's own. Node-level values come
from one partition only, so a host is counted once (Ray's dashboard reports
every GPU from every raylet of a host). `ray-accel top` reads the same
snapshots back from the actors.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

import psutil

from ray_accel.metrics.collect import Snapshot, collect
from ray_accel.partition.labels import PARTITION_LABEL

log = logging.getLogger(__name__)

NAMESPACE = "ray-accel"
INTERVAL_ENV = "RAYACCEL_METRICS_INTERVAL_S"
DEVICE_TAGS = ("partition", "device_id", "family", "accelerator_type")


def actor_name(partition: str) -> str:
    return f"exporter-{partition}"


class PartitionExporter:
    def __init__(self, partition: str, device_ids: Sequence[str], node_level: bool, interval_s: float) -> None:
        from ray.util.metrics import Gauge

        from ray_accel.plugins.inventory import discover

        plugin = discover().primary
        if plugin is None:
            raise RuntimeError("no active accelerator backend in the metrics agent's process")
        self.plugin = plugin
        self.telemetry = plugin.telemetry
        self.partition = partition
        self.devices = [d for d in plugin.list_devices() if d.id in set(device_ids)]
        self.accelerator_type = plugin.node_info().accelerator_type
        self.node_level = node_level
        self.interval_s = interval_s
        self.raylet = os.getppid()
        self.host = socket.gethostname()
        g = Gauge
        self.g = {
            "util": g("ray_accel_device_utilization", "Device utilisation, 0..1", DEVICE_TAGS),
            "used": g("ray_accel_device_memory_used_bytes", "Device memory in use", DEVICE_TAGS),
            "total": g("ray_accel_device_memory_total_bytes", "Device memory", DEVICE_TAGS),
            "healthy": g("ray_accel_device_healthy", "1 healthy, 0 unhealthy or gone", DEVICE_TAGS),
            "power": g("ray_accel_device_power_watts", "Device power draw", DEVICE_TAGS),
            "temp": g("ray_accel_device_temperature_celsius", "Device temperature", DEVICE_TAGS),
            "w_rss": g(
                "ray_accel_workload_rss_bytes", "Host memory of a Ray worker's process tree", ("partition", "workload")
            ),
            "w_cpu": g(
                "ray_accel_workload_cpu_seconds", "CPU time of a Ray worker's process tree", ("partition", "workload")
            ),
            "w_dev": g(
                "ray_accel_workload_device_memory_bytes",
                "Device memory held by a Ray worker's process tree",
                ("partition", "workload", "device_id"),
            ),
            "n_devices": g(
                "ray_accel_node_devices", "Accelerator devices on the host", ("host", "family", "accelerator_type")
            ),
            "n_mem": g("ray_accel_node_host_memory_used_bytes", "Host memory in use", ("host",)),
        }
        self._last: Snapshot | None = None
        self._lock = threading.Lock()
        self.sample()
        threading.Thread(target=self._loop, daemon=True, name="ray-accel-metrics").start()

    def _loop(self) -> None:
        while True:
            time.sleep(self.interval_s)
            try:
                self.sample()
            except Exception:
                log.exception("ray-accel metrics sample failed")

    def sample(self) -> dict[str, Any]:
        snap = collect(self.telemetry, self.devices, self.partition, self.accelerator_type, self.raylet, {os.getpid()})
        for d in snap.devices:
            tags = {
                "partition": d.partition,
                "device_id": d.id,
                "family": d.family,
                "accelerator_type": d.accelerator_type or "",
            }
            if d.utilization is not None:
                self.g["util"].set(d.utilization, tags)
            if d.memory_used_bytes is not None:
                self.g["used"].set(d.memory_used_bytes, tags)
            if d.memory_total_bytes is not None:
                self.g["total"].set(d.memory_total_bytes, tags)
            self.g["healthy"].set(1.0 if d.healthy else 0.0, tags)
            if d.power_watts is not None:
                self.g["power"].set(d.power_watts, tags)
            if d.temperature_c is not None:
                self.g["temp"].set(d.temperature_c, tags)
        for w in snap.workloads:
            wt = {"partition": w.partition, "workload": w.workload}
            self.g["w_rss"].set(w.rss_bytes, wt)
            self.g["w_cpu"].set(w.cpu_seconds, wt)
            for dev, nbytes in w.device_memory_bytes.items():
                self.g["w_dev"].set(nbytes, {**wt, "device_id": dev})
        if self.node_level:
            info = self.plugin.node_info()
            self.g["n_devices"].set(
                info.device_count,
                {"host": self.host, "family": info.family, "accelerator_type": info.accelerator_type or ""},
            )
            self.g["n_mem"].set(psutil.virtual_memory().used, {"host": self.host})
        with self._lock:
            self._last = snap
        return snap.to_json()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return self._last.to_json() if self._last is not None else {}


def deploy(address: str, partitions: Sequence[dict[str, Any]], interval_s: float | None = None) -> list[str]:
    """Start (or restart) the metrics actor of each partition; returns their names."""
    import ray

    interval = interval_s or float(os.environ.get(INTERVAL_ENV, "5"))
    remote_cls = ray.remote(num_cpus=0, max_restarts=0)(PartitionExporter)
    connect(address)
    try:
        handles = []
        for i, p in enumerate(partitions):
            name = actor_name(p["partition"])
            try:
                ray.kill(ray.get_actor(name, namespace=NAMESPACE))
            except ValueError:
                pass
            handles.append(
                remote_cls.options(
                    name=name,
                    namespace=NAMESPACE,
                    lifetime="detached",
                    label_selector={PARTITION_LABEL: p["partition"]},
                ).remote(p["partition"], p["device_ids"], i == 0, interval)
            )
        ray.get([h.snapshot.remote() for h in handles], timeout=120)
        return [actor_name(p["partition"]) for p in partitions]
    finally:
        ray.shutdown()


def connect(address: str) -> None:
    import ray

    if not ray.is_initialized():
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.WARNING)


def snapshots(partitions: Sequence[str], timeout_s: float = 10.0) -> dict[str, dict[str, Any] | str]:
    """Each partition's latest snapshot, or the reason there is none (connected driver)."""
    import ray

    refs = {}
    out: dict[str, dict[str, Any] | str] = {}
    for agent in partitions:
        try:
            refs[agent] = ray.get_actor(actor_name(agent), namespace=NAMESPACE).snapshot.remote()
        except Exception as e:
            out[agent] = f"no metrics agent: {e}"
    for agent, ref in refs.items():
        try:
            out[agent] = ray.get(ref, timeout=timeout_s)
        except Exception as e:
            out[agent] = f"{type(e).__name__}: {e}"
    return out
