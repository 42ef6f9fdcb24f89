"""A device that goes bad leaves scheduling through Ray, its work moves, and
it comes back when healthy: real Ray, mock hardware, injected faults, polls
of 0.5 s counted (never timed). One cluster serves one story: these tests
change their clusters, so they never share one.

- a mock trn1.32xlarge in two partitions, `--on-unhealthy shrink`: a fatal
  event on a device of p1 while a 4-worker fit spans both; p1 is drained
  (the GCS says so by the third poll), new work lands on p0, the fit goes
  Restarting and finishes on what is left, p1 serves again without the
  device (14 NeuronCores), its old raylet is DEAD with the drain's message;
  `health clear` brings the full partition back; so does a lost device that
  is present again for K polls;
- a mock p4d.24xlarge, `--on-unhealthy drain`: XID 13 only counts (health
  and a metric), XID 79 on p0 (once the head partition) drains and stops it
  like any partition (drivers stay connected to the device-less head raylet,
  new work lands on p1) and `health clear` brings it back; the driver's recovery action
  DRAIN_AND_RESET on a worker's GPU, with no XID, drains that partition
  (`health --json` names the source); `stop` while it drains leaves nothing;
- with metrics on, a drained partition's exporter leaves it: with nothing
  running there, Ray ends the raylet within seconds of the drain (deadline
  120 s); with an actor there, it drains until the actor ends while its
  devices' series come from the host-level exporter;
- the real Neuron backend on fake sysfs trees: ECC growth (trn1.32xlarge)
  and Trainium3's `unhealthy_components` take the same path; `stop` during
  the return of one and the shrink of the other leaves nothing.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from ray_accel.cluster.host import free_port
from ray_accel.core.health import Health
from ray_accel.core.health_state import PartState
from tests.cli_process import repo_pythonpath, run_cli
from tests.fakes.neuron_env import MONITOR_STUB, executable, tree_only
from tests.fakes.neuron_sysfs import NeuronSysfs, build_tree
from tests.integration.cluster_harness import Cluster, ClusterSpec, raylet_pids, start_cluster
from tests.integration.health_steps import (
    WAITING_FIT,
    alive_node,
    background_driver,
    device,
    gcs_view,
    gone,
    health,
    lock_is_free,
    part,
    ray_cli,
    record,
    result_of,
    until,
    until_poll,
    waiting_fit,
    write_faults,
)
from tests.integration.scrapes import scrape, scrape_all
from tests.tagged import new_tag, tagged

pytestmark = pytest.mark.ray

P1 = [f"neuron:{i}" for i in range(8, 16)]

# Connected before the fault; submits once told to (while p1 drains).
TASKS = r"""
import json, sys, time
from pathlib import Path
import ray
ray.init(address=sys.argv[1], log_to_driver=False)
go = Path(sys.argv[2])
(go.parent / "tasks-connected").write_text("1")
while not go.exists():
    time.sleep(0.05)

@ray.remote(resources={"neuron_cores": 2}, num_cpus=0)
def where():
    return ray.get_runtime_context().get_node_labels().get("ray-accel.io/partition")

print(json.dumps(ray.get([where.remote() for _ in range(4)], timeout=120)))
"""


def test_a_bad_device_is_drained_its_fit_moves_it_is_shrunk_then_restored(tmp_path: Path) -> None:
    faults = tmp_path / "faults.json"
    write_faults(faults, {})
    spec = ClusterSpec(
        "health-shrink",
        "trn1.32xlarge",
        2,
        start_args=(
            "--on-unhealthy",
            "shrink",
            "--health-interval",
            "0.5",
            "--drain-deadline",
            "12",
            "--labels",
            "team=ml",
        ),
        env={
            "RAYACCEL_MOCK_FAULTS": str(faults),
            # Ray Train's preemption watcher runs in the raylets' processes: see a drain within a second.
            "RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S": "1",
        },
        dashboard=True,  # `ray list nodes` and the job store need Ray's state API
    )
    cluster = start_cluster(tmp_path / "c", spec)
    fit_log, tasks_log = tmp_path / "fit.log", tmp_path / "tasks.log"
    out = tmp_path / "fit"
    out.mkdir()
    drivers = []
    try:
        before = alive_node(cluster, "p1")
        assert before.total["neuron_cores"] == 16
        fit_spec = waiting_fit(
            "health-shrink", ["p0", "p0", "p1", "p1"], {"neuron_cores": 4}, max_failures=1, steps=3, skip_if=True
        )
        fit = background_driver(cluster, WAITING_FIT, str(out), fit_spec, log=fit_log)
        drivers.append(fit)
        until(lambda: len(list((out / "ws4").glob("rank*.json"))) == 4 or fit.poll() is not None, 400)
        assert fit.poll() is None, fit_log.read_text()[-3000:]
        tasks = background_driver(cluster, TASKS, str(tmp_path / "go"), log=tasks_log)
        drivers.append(tasks)
        until(lambda: (tmp_path / "tasks-connected").exists() or tasks.poll() is not None, 120)

        # The fault: by the third poll p1 is draining, in health.json and in the GCS.
        write_faults(faults, {"events": [{"device": "neuron:11", "kind": "ecc", "code": "mem_ecc_uncorrected"}]})
        (out / "moved").write_text("1")
        h = until_poll(cluster, lambda h: part(h, "p1").state is PartState.DRAINING, polls=3)
        _, draining = gcs_view(cluster)
        assert before.node_id in draining, "drained through Ray"
        (tmp_path / "go").write_text("1")
        assert part(h, "p1").out == ("neuron:11",) and part(h, "p0").state is PartState.SERVING
        dev = device(h, "neuron:11")
        assert dev.state is Health.UNHEALTHY and dev.last_event is not None
        shown = json.loads(cluster.cli("health", "--json").stdout)
        (named,) = [d for d in shown["devices"] if d["device_id"] == "neuron:11"]
        assert named["state"] == "unhealthy" and "mem_ecc_uncorrected" in named["last_event"]["reason"]
        status = cluster.refresh()
        (p1,) = [p for p in status["partitions"] if p["partition"] == "p1"]
        assert p1["health"]["state"] == "draining" and "neuron:11" in p1["health"]["detail"]
        assert [d["device_id"] for d in status["health"]["not_healthy"]] == ["neuron:11"]

        # New work asking for NeuronCores lands on the partition left.
        assert result_of(tasks, tasks_log, 180) == ["p0"] * 4

        # The fit is preempted (Restarting), then finishes on p0 and the shrunk p1.
        result = result_of(fit, fit_log, 600)
        assert result["ok"], result
        job = json.loads(cluster.cli("jobs", "show", result["id"], "--json").stdout)
        phases = [p["phase"] for p in job["phases"]]
        assert "Restarting" in phases and phases[-1] == "Succeeded", phases
        assert phases.index("Restarting") > phases.index("Running")

        # p1 serves again without the device: same name and labels, 14 NeuronCores.
        h = until_poll(cluster, lambda h: part(h, "p1").state is PartState.SHRUNK, polls=200)
        shrunk = alive_node(cluster, "p1")
        assert shrunk.node_id != before.node_id and shrunk.total["neuron_cores"] == 14
        for key in ("ray-accel.io/host", "ray-accel.io/accelerator-type", "team"):
            assert shrunk.labels[key] == before.labels[key], key
        assert shrunk.labels["ray-accel.io/cores"] == "16-21_24-31"
        listed = json.loads(
            ray_cli(
                cluster,
                "list",
                "nodes",
                "--format",
                "json",
                "--detail",
                "--address",
                cluster.status["dashboard_address"],
            )
        )
        (old,) = [n for n in listed if n["node_id"] == before.node_id]
        assert old["state"] == "DEAD" and "ray-accel health: neuron:11" in (old["state_message"] or ""), old

        # `health clear`: drained again, restarted with its full mask and labels.
        shrunk_procs = [r.record for r in record(cluster).partitions[1].processes]
        cleared = cluster.cli("health", "clear", "neuron:11", "--json")
        assert cleared.returncode == 0, cleared.stderr
        until_poll(cluster, lambda h: part(h, "p1").state is PartState.RESTORING, polls=3)
        h = until_poll(cluster, lambda h: part(h, "p1").state is PartState.SERVING, polls=200)
        assert part(h, "p1").devices == tuple(P1) and part(h, "p1").out == ()
        full = alive_node(cluster, "p1")
        assert full.total["neuron_cores"] == 16 and full.labels["ray-accel.io/cores"] == "16-31"
        # The same labels (Ray's own node id aside: a new raylet is a new node).
        same = {"ray-accel.io/cores", "ray.io/node-id"}
        assert {k: v for k, v in full.labels.items() if k not in same} == {
            k: v for k, v in before.labels.items() if k not in same
        }
        assert until(lambda: gone(shrunk_procs), 30), "no process of the shrunk raylet is left"
        # `ray status` reads the autoscaler's view, which follows the GCS a few
        # seconds behind: the totals are right once that view has the new raylet.
        shown: list[str] = []
        assert until(
            lambda: (
                shown.append(ray_cli(cluster, "status", "--address", cluster.address))
                or "/32.0 neuron_cores" in shown[-1]
            ),
            60,
        ), shown[-1]
        p1_entry = record(cluster).partitions[1]
        assert p1_entry.visible_ids == ",".join(str(c) for c in range(16, 32)) and p1_entry.out == ()

        # A lost device: out while gone, back with its partition once present for K polls.
        write_faults(faults, {"lost": ["neuron:12"]})
        until_poll(cluster, lambda h: part(h, "p1").state is PartState.DRAINING, polls=3)
        until_poll(cluster, lambda h: part(h, "p1").state is PartState.SHRUNK, polls=200)
        assert alive_node(cluster, "p1").total["neuron_cores"] == 14
        lost_procs = [r.record for r in record(cluster).partitions[1].processes]
        write_faults(faults, {})
        h = until_poll(cluster, lambda h: part(h, "p1").state is PartState.RESTORING, polls=4)
        assert device(h, "neuron:12").state is Health.HEALTHY
        until_poll(cluster, lambda h: part(h, "p1").state is PartState.SERVING, polls=200)
        assert alive_node(cluster, "p1").total["neuron_cores"] == 16
        assert until(lambda: gone(lost_procs), 30)
        decider = record(cluster).decider
        assert decider is not None
    finally:
        for d in drivers:
            if d.poll() is None:
                d.kill()
                d.wait()
        stopped = cluster.stop()
    assert stopped.returncode == 0, stopped.stderr
    assert not decider.record.alive() and not raylet_pids(), "the decider and every raylet are gone"


# Holds two NeuronCores of p1 until killed.
HOLD_P1 = r"""
import json, sys, time
import ray
ray.init(address=sys.argv[1], log_to_driver=False)

@ray.remote(resources={"neuron_cores": 2}, num_cpus=0)
class Holder:
    def where(self):
        return ray.get_runtime_context().get_node_labels().get("ray-accel.io/partition")

h = Holder.options(label_selector={"ray-accel.io/partition": "p1"}).remote()
print(json.dumps(ray.get(h.where.remote())), flush=True)
time.sleep(600)
"""


def ecc(device: str) -> dict[str, str]:
    return {"device": device, "kind": "ecc", "code": "mem_ecc_uncorrected"}


def series(port: int, partition: str) -> set[str]:
    """The devices of `partition` whose utilisation a raylet's metrics agent serves."""
    return {
        labels["device_id"]
        for name, labels, _ in scrape(port)
        if name == "ray_accel_device_utilization" and labels["partition"] == partition
    }


def test_with_metrics_on_a_drained_partition_ends_once_its_work_has_moved(tmp_path: Path) -> None:
    faults = tmp_path / "faults.json"
    write_faults(faults, {})
    spec = ClusterSpec(
        "health-drain",
        "trn1.32xlarge",
        2,
        start_args=("--on-unhealthy", "shrink", "--health-interval", "0.5", "--drain-deadline", "120"),
        # Metrics on, sampled every 5 s (the default); Ray keeps a series 2 s after its last value.
        env={"RAYACCEL_MOCK_FAULTS": str(faults), "RAY_metrics_report_interval_ms": "1000"},
    )
    cluster = start_cluster(tmp_path / "c", spec)
    ports = {p.name: p.ports.named["metrics_export_port"] for p in record(cluster).partitions}
    holder = None
    try:
        assert record(cluster).metrics
        first = alive_node(cluster, "p1")
        until(lambda: series(ports["p1"], "p1") == set(P1), 60)

        # Nothing runs on p1: Ray ends it within seconds of the drain, not at its deadline.
        write_faults(faults, {"events": [ecc("neuron:11")]})
        h = until_poll(cluster, lambda h: part(h, "p1").state is PartState.DRAINING, polls=3)
        t0 = part(h, "p1").since  # the decider's clock, as it asked the GCS to drain
        until(lambda: not gcs_view(cluster)[0][first.node_id].alive, 120, every_s=0.1)
        took = time.time() - t0
        old = gcs_view(cluster)[0][first.node_id]
        print(f"\nidle drained p1 dead in the GCS {took:.1f}s after the drain (deadline 120s)")
        assert took < 15, f"{took:.1f}s"
        assert old.death_reason == "AUTOSCALER_DRAIN_PREEMPTED" and "ray-accel health: neuron:11" in old.death_message
        until_poll(cluster, lambda h: part(h, "p1").state is PartState.SHRUNK, polls=200)
        second = alive_node(cluster, "p1")
        assert second.total["neuron_cores"] == 14

        # An actor on p1: it drains until the actor ends; meanwhile p1's devices
        # are served from p0's metrics agent (the host-level exporter), not p1's.
        holder = background_driver(cluster, HOLD_P1, log=tmp_path / "hold.log")
        until(lambda: "p1" in (tmp_path / "hold.log").read_text() or holder.poll() is not None, 180)
        assert holder.poll() is None, (tmp_path / "hold.log").read_text()[-2000:]
        write_faults(faults, {"events": [ecc("neuron:11"), ecc("neuron:12")]})
        h = until_poll(cluster, lambda h: part(h, "p1").state is PartState.DRAINING, polls=3)
        serving = set(part(h, "p1").devices)
        assert serving == set(P1) - {"neuron:11"}
        until(lambda: series(ports["p0"], "p1") == serving and not series(ports["p1"], "p1"), 60, every_s=1)
        states = {
            labels["state"]: v
            for name, labels, v in scrape(ports["p0"])
            if name == "ray_accel_partition_state" and labels["partition"] == "p1"
        }
        assert states["draining"] == 1.0, states
        polls = health(cluster).polls
        until_poll(cluster, lambda h: h.polls >= polls + 10, polls=10)  # well past an idle drain's end
        nodes, draining = gcs_view(cluster)
        assert nodes[second.node_id].alive and second.node_id in draining, "the actor keeps it, drained"
        held = time.time() - part(h, "p1").since
        holder.kill()
        holder.wait()
        t1 = time.time()
        until(lambda: not gcs_view(cluster)[0][second.node_id].alive, 120, every_s=0.1)
        print(f"p1 with an actor: alive {held:.1f}s into its drain, dead {time.time() - t1:.1f}s after the actor's end")
        until_poll(cluster, lambda h: part(h, "p1").state is PartState.SHRUNK, polls=200)
        assert alive_node(cluster, "p1").total["neuron_cores"] == 12
        until(lambda: series(ports["p1"], "p1") == serving - {"neuron:12"}, 60, every_s=1)
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
            holder.wait()
        stopped = cluster.stop()
    assert stopped.returncode == 0, stopped.stderr


# Connected before p0's fault: asks for GPUs twice while p0 drains, then once it is stopped.
GPU_DRIVER = r"""
import json, sys, time
from pathlib import Path
import ray
ray.init(address=sys.argv[1], log_to_driver=False)
d = Path(sys.argv[2])
(d / "connected").write_text("1")

@ray.remote(num_gpus=1, num_cpus=0)
def where():
    return ray.get_runtime_context().get_node_labels().get("ray-accel.io/partition")

rounds = []
for name in ("first", "second"):
    while not (d / name).exists():
        time.sleep(0.05)
    rounds.append(ray.get([where.remote() for _ in range(8)], timeout=120))
print(json.dumps(rounds))
"""


def nothing_left(cluster: Cluster, tag: dict[str, str]) -> None:
    """After `stop`: no process the cluster started (every one carries its tag),
    no record, the host's lock free."""
    until(lambda: not tagged(tag), 30)
    assert not (cluster.state_dir / "host.json").exists()
    assert lock_is_free(cluster.state_dir)


def test_a_gpu_host_counts_xid_13_drains_on_79_its_first_partition_too_and_stops_mid_drain(tmp_path: Path) -> None:
    faults = tmp_path / "faults.json"
    write_faults(faults, {})
    tag = new_tag()
    spec = ClusterSpec(
        "health-gpu",
        "p4d.24xlarge",
        2,
        start_args=("--on-unhealthy", "drain", "--health-interval", "0.5", "--drain-deadline", "600"),
        env={
            "RAYACCEL_MOCK_FAULTS": str(faults),
            "RAYACCEL_METRICS_INTERVAL_S": "1",
            "RAY_metrics_report_interval_ms": "1000",
            **tag,
        },
    )
    cluster = start_cluster(tmp_path / "c", spec)
    gpus = {p["partition"]: p["device_ids"] for p in cluster.status["partitions"]}
    d = tmp_path / "d"
    d.mkdir()
    driver = None
    try:
        # A non-fatal XID only counts: in `health --json` and as a metric.
        xid13 = {"device": gpus["p1"][0], "kind": "xid", "code": 13}
        write_faults(faults, {"events": [xid13]})
        h = until_poll(cluster, lambda h: h.counters.get(gpus["p1"][0]) == {"xid:13": 1}, polls=3)
        assert device(h, gpus["p1"][0]).state is Health.HEALTHY
        assert {p.state for p in h.partitions} == {PartState.SERVING}
        shown = json.loads(cluster.cli("health", "--json").stdout)
        assert shown["counters"] == {gpus["p1"][0]: {"xid:13": 1}}
        (dev,) = [x for x in shown["devices"] if x["device_id"] == gpus["p1"][0]]
        assert dev["state"] == "healthy" and dev["last_event"]["fatal"] is False
        assert dev["source"] == "xid", "the mock's GPUs have no recovery action: the XID list decides"
        until(
            lambda: (
                [
                    v
                    for name, labels, v in scrape_all(cluster)
                    if name == "ray_accel_device_health_events"
                    and labels["device_id"] == gpus["p1"][0]
                    and (labels["kind"], labels["code"], labels["partition"]) == ("xid", "13", "p1")
                ]
                == [1.0]
            ),
            90,
            every_s=1,
        )

        # A fatal XID on p0, the head partition before the head raylet held no
        # devices: drained, then stopped like any; drivers stay connected.
        driver = background_driver(cluster, GPU_DRIVER, str(d), log=tmp_path / "gpu.log")
        until(lambda: (d / "connected").exists() or driver.poll() is not None, 120)
        first = alive_node(cluster, "p0")
        xid79 = {"device": gpus["p0"][0], "kind": "xid", "code": 79}
        write_faults(faults, {"events": [xid13, xid79]})
        h = until_poll(cluster, lambda h: part(h, "p0").state is PartState.DRAINING, polls=3)
        assert "drained to stop" in part(h, "p0").detail and gpus["p0"][0] in part(h, "p0").out
        assert first.node_id in gcs_view(cluster)[1]
        (d / "first").write_text("1")
        # Its exporter leaves, Ray ends the idle raylet, the decider stops it (under drain, whole or not at all).
        until_poll(cluster, lambda h: part(h, "p0").state is PartState.STOPPED, polls=120)
        nodes, _ = gcs_view(cluster)
        assert (
            not nodes[first.node_id].alive
            and "partition p0 is drained and stopped" in nodes[first.node_id].death_message
        )
        (d / "second").write_text("1")
        assert result_of(driver, tmp_path / "gpu.log", 300) == [["p1"] * 8] * 2, "new work lands on p1"
        # Fixed by hand: p0 comes back whole, on a new raylet, as any partition does.
        assert cluster.cli("health", "clear", gpus["p0"][0]).returncode == 0
        h = until_poll(cluster, lambda h: part(h, "p0").state is PartState.SERVING, polls=200)
        assert part(h, "p0").devices == tuple(gpus["p0"]) and alive_node(cluster, "p0").node_id != first.node_id
        status = cluster.refresh()
        assert status["gcs_alive"] and status["head"]["alive"] and all(p["alive"] for p in status["partitions"])

        # The driver asks for DRAIN_AND_RESET on a worker's GPU, no XID: the
        # action decides, and its partition drains.
        worker = alive_node(cluster, "p1")
        bad = {"device": gpus["p1"][1], "kind": "recovery", "code": "DRAIN_AND_RESET"}
        write_faults(faults, {"events": [xid13, xid79, bad]})
        until_poll(cluster, lambda h: part(h, "p1").state is PartState.DRAINING, polls=3)
        assert worker.node_id in gcs_view(cluster)[1]
        shown = {d["device_id"]: d for d in json.loads(cluster.cli("health", "--json").stdout)["devices"]}
        acted = shown[gpus["p1"][1]]
        assert (acted["state"], acted["source"], acted["last_event"]["code"]) == (
            "unhealthy",
            "recovery-action",
            "DRAIN_AND_RESET",
        ), acted
        assert shown[gpus["p1"][0]]["source"] == "xid", "no action read for it: the XID list decides"

        # `stop` while a worker partition drains (its deadline far away): nothing left.
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
            driver.wait()
        stopped = cluster.stop()
    assert stopped.returncode == 0, stopped.stderr
    nothing_left(cluster, tag)


def start_neuron(
    tmp_path: Path, tree: NeuronSysfs, tag: dict[str, str], *extra: str, metrics: bool = False, **env_extra: str
) -> Cluster:
    """The real Neuron backend on a fake sysfs tree, two partitions, no
    dashboard and (unless `metrics`) no exporters: a drained raylet with
    nothing on it ends itself (Ray's own idle exit), so no deadline is waited for."""
    env = {
        **tree_only(tree),
        "RAYACCEL_NEURON_MONITOR": "off",
        "RAYACCEL_STATE_DIR": str(tmp_path / "state"),
        "PYTHONPATH": repo_pythonpath(),
        **tag,
        **env_extra,
    }
    args = ("--on-unhealthy", "shrink", "--health-interval", "0.5", "--drain-deadline", "120", *extra)
    proc = run_cli(
        "start",
        "--head",
        "--partitions",
        "2",
        "--port",
        str(free_port()),
        "--backend",
        "neuron",
        "--no-dashboard",
        *(() if metrics else ("--no-metrics",)),
        *args,
        "--json",
        env=env,
        timeout=300,
    )
    if proc.returncode != 0:
        run_cli("stop", "--grace", "2", env=env)
        raise AssertionError(f"start failed: {proc.stderr[-3000:]}")
    return Cluster(env, json.loads(proc.stdout), proc.stderr)


def stop_while_restarting(cluster: Cluster, name: str) -> subprocess.CompletedProcess[str]:
    """`ray-accel stop` as soon as the decider is restarting partition `name`
    again (relaunching its raylet, under the host's lock: its log says so)."""
    log, line = cluster.state_dir / "decider.log", f"restarting {name}:"
    before = log.read_text().count(line)
    until(lambda: log.read_text().count(line) > before, 300, every_s=0.02)
    return cluster.stop()


def test_neuron_ecc_growth_on_sysfs_shrinks_and_a_stop_during_the_return_leaves_nothing(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "tree", "trn1.32xlarge")
    tag = new_tag()
    cluster = start_neuron(tmp_path, tree, tag)
    before = alive_node(cluster, "p1")
    try:
        tree.set_ecc(11, "mem_ecc_uncorrected", 2)  # from the baseline 0: growth
        until_poll(cluster, lambda h: part(h, "p1").state is PartState.DRAINING, polls=3)
        h = until_poll(cluster, lambda h: part(h, "p1").state is PartState.SHRUNK, polls=100)
        assert part(h, "p1").out == ("neuron:11",)
        assert alive_node(cluster, "p1").total["neuron_cores"] == 14
        old = gcs_view(cluster)[0][before.node_id]
        assert not old.alive and old.death_reason == "AUTOSCALER_DRAIN_PREEMPTED" and "neuron:11" in old.death_message
        assert cluster.cli("health", "clear", "neuron:11").returncode == 0
        stopped = stop_while_restarting(cluster, "p1")
    finally:
        if "stopped" not in locals():
            stopped = cluster.stop()
    assert stopped.returncode == 0, stopped.stderr
    assert "p1: restart interrupted" in (cluster.state_dir / "decider.log").read_text()
    nothing_left(cluster, tag)


def test_trainium3_unhealthy_components_shrink_and_a_stop_during_a_shrink_leaves_nothing(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "tree", "trn3.48xlarge")
    tag = new_tag()
    cluster = start_neuron(tmp_path, tree, tag)
    try:
        assert alive_node(cluster, "p1").total["neuron_cores"] == 32
        tree.set_unhealthy(10, "hbm")
        until_poll(cluster, lambda h: part(h, "p1").state is PartState.DRAINING, polls=3)
        h = until_poll(cluster, lambda h: part(h, "p1").state is PartState.SHRUNK, polls=100)
        assert part(h, "p1").out == ("neuron:10",)
        assert alive_node(cluster, "p1").total["neuron_cores"] == 28
        tree.set_unhealthy(11, "device_unreachable")
        until_poll(cluster, lambda h: part(h, "p1").state is PartState.DRAINING, polls=3)
        stopped = stop_while_restarting(cluster, "p1")
    finally:
        if "stopped" not in locals():
            stopped = cluster.stop()
    assert stopped.returncode == 0, stopped.stderr
    assert "p1: restart interrupted" in (cluster.state_dir / "decider.log").read_text()
    nothing_left(cluster, tag)


def test_neuron_ecc_growth_only_neuron_monitor_sees_shrinks_with_one_monitor_on_the_host(tmp_path: Path) -> None:
    """Where sysfs has no ECC node, the host's one neuron-monitor (the
    decider's; the fake's mem_ecc_uncorrected grows for device 11 alone)
    takes the device out; the exporters, metrics on, start none of their own."""
    tree = build_tree(tmp_path / "tree", "trn1.32xlarge")
    for i in range(16):
        for name in ("mem_ecc_uncorrected", "sram_ecc_uncorrected", "mem_ecc_repairable_uncorrected"):
            tree.ecc_file(i, name).unlink()
    tag = new_tag()
    cluster = start_neuron(
        tmp_path,
        tree,
        tag,
        "--drain-deadline",
        "10",  # the exporter on p1 keeps its drained raylet alive until the deadline
        metrics=True,
        RAYACCEL_NEURON_MONITOR=str(executable(tmp_path / "neuron-monitor", MONITOR_STUB)),
        RAYACCEL_NEURON_MONITOR_PERIOD_S="1",
        STUB_MONITOR_DEVICES="16",
        STUB_MONITOR_GROW="11:mem_ecc_uncorrected",
    )
    try:
        h = until_poll(cluster, lambda h: part(h, "p1").state is PartState.SHRUNK, polls=200)
        assert part(h, "p1").out == ("neuron:11",) and part(h, "p0").state is PartState.SERVING
        assert alive_node(cluster, "p1").total["neuron_cores"] == 14
        shown = {d["device_id"]: d for d in json.loads(cluster.cli("health", "--json").stdout)["devices"]}
        assert shown["neuron:11"]["state"] == "unhealthy"
        assert shown["neuron:11"]["last_event"]["code"] == "mem_ecc_uncorrected"
        assert shown["neuron:11"]["source"] == "neuron-monitor"
        assert shown["neuron:3"]["state"] == "healthy"
        monitors = [pid for pid in tagged(tag) if b"neuron_monitor_stub" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(monitors) == 1, f"neuron-monitor processes on the host: {monitors}"
        assert (cluster.state_dir / "readings.json").exists()
    finally:
        stopped = cluster.stop()
    assert stopped.returncode == 0, stopped.stderr
    nothing_left(cluster, tag)
