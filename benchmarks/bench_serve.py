"""Question: what does a Ray Serve deployment on a partitioned host answer,
how fast and how often not, in steady state and while ray-accel takes a
partition out from under it (a device fault under `--on-unhealthy shrink`,
a repartition, the device's return)? And, for context, what does the same
deployment answer through the same fault on one unpartitioned raylet, which
a host without ray-accel must restart to leave the device out?

Host: mock trn1.32xlarge (16 devices, 32 NeuronCores). Both sides serve the
same deployment and load, from tests/serve_traffic.py (which the continuity
test, tests/integration/test_serve_continuity.py, runs too): 3 replicas of 2
NeuronCores (`num_cpus=0`), Serve's one proxy on the head
(`proxy_location="HeadOnly"`), and a client process of its own sending 14
requests a second on a fixed schedule (a slow reply delays no later request),
one HTTP connection each, 30 s timeout, every request recorded.

- ray-accel: `ray-accel start --head --mode manual --manual
  "p0=0-3;p1=4-7;p2=8-11;p3=12-15" --on-unhealthy shrink --drain-deadline 60
  --health-interval 0.5` (dashboard and metrics on, as by default; the CLI,
  as a user runs it), replicas at most one per partition
  (`max_replicas_per_node=1`), on p0, p1 and p2. Events, in order, as the
  continuity test runs them: neuron:5 of p1 lost (the mock's fault file; the
  decider drains p1 through Ray and restarts it without the device, 6
  NeuronCores); `ray-accel repartition --manual "p0=0-3;p1=4-7;p23=8-15"`
  (p0 and the shrunk p1 kept, p2 and p3 drained and removed, p23 added);
  neuron:5 back (p1 drained again and restarted whole).
- one raylet, no ray-accel: `ray start --head --block` with the whole host's
  cores as its resource (`{"neuron_cores": 32}`) and the same token auth,
  the dashboard on (the driver lists Serve's replicas through Ray's state
  API on both sides); the same deployment without `max_replicas_per_node`
  (one Ray node: at most one per node would place one replica). The same
  fault: with one raylet the bad device can only be left out by a restart,
  as a host without ray-accel does it: the deploying driver ended (Serve's
  application is detached and keeps serving), then `ray start` stopped (by
  PID: it stops Ray's processes, the GCS with them, so Serve goes too),
  started again with `{"neuron_cores": 30}` (a new GCS port, so no socket of
  the old one can refuse it), and the application deployed again by a new
  driver, as an operator's script would.

Windows: steady state is the --steady seconds after the client's first
request, before any event; each event's window runs from its cause (the
fault file written, `repartition` called, the `ray start` stopped) until
Serve has 3 replicas RUNNING and nothing else, on partitions alive and
serving (or shrunk) in `ray-accel status --json` (on one raylet: until the
redeployed application runs 3). Figures per window, over the requests sent
in it once each has its answer: requests sent, failed (any reply but 200,
or none), OK/s (200s a second: under a fixed offered load it reads as how
much of the load was served), p50 and p99 latency of the 200s (nearest
rank); each as a ratio to the same side's steady state in the same run. The
windows differ in length (each event takes as long as it takes); the
failures are counts, not rates.

    python benchmarks/bench_serve.py [--steady 30] [--rate 14] [--quick] [--json]

`--quick` (CI): 8 s of steady state and the device fault on both sides (one
run of each), the same code path in about half the time: the repartition and
the return are in the full run, and the suite's test_serve_continuity.py
runs all three. No figure is judged here or in CI.

Ctrl-C or SIGTERM at any point stops every process this run started, by PID
(`ray-accel stop` for what `ray-accel start` started; the `ray start`
command, the drivers and the client by their own PIDs), before it exits 130.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ray_accel_mock.faults import FAULTS_ENV

from benchmarks.harness import BIN, CliCluster, StartFailed, run_main, say, shielded, stop_popen, stop_ray_starts
from ray_accel.cli.render import render
from ray_accel.cluster import auth
from ray_accel.cluster.host import free_port
from ray_accel.core.health_state import PartState, read_health
from ray_accel.rayapi.gcs import gcs_nodes
from tests import serve_traffic
from tests.cli_process import repo_pythonpath
from tests.integration.health_steps import write_faults

PRESET = "trn1.32xlarge"
HOST_CORES = 32
SPLIT = "p0=0-3;p1=4-7;p2=8-11;p3=12-15"
MERGED = "p0=0-3;p1=4-7;p23=8-15"
DRAIN_DEADLINE_S = 60
LOST = "neuron:5"  # of p1 (neuron:4-7, NeuronCores 8-15); 2 NeuronCores
RATE = 14.0
STEADY_S = 30.0
QUICK_STEADY_S = 8.0
SETTLE_S = 300.0  # an event that has not settled by then ends the benchmark
REGISTER_S = 180.0


def until(check: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (result := check()):
        if time.monotonic() > deadline:
            raise SystemExit(f"not within {timeout_s:g} s: {what}")
        time.sleep(every_s)
    return result


class Traffic:
    """The client (one, for the whole side) and the deploying drivers (one
    per deployment), in folders under `out`; stopped on leaving, by PID if
    the stop file does not end them."""

    def __init__(self, out: Path, port: int, rate: float) -> None:
        self.out, self.port, self.rate = out, port, rate
        self.client_dir = out / "client"
        self.client_dir.mkdir(parents=True)
        self.client: subprocess.Popen[str] | None = None
        self.drivers: list[tuple[Path, subprocess.Popen[str]]] = []
        self.asked = 0

    def __enter__(self) -> Traffic:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        with shielded():
            self.stop(patient=kind is None)

    @property
    def driver_dir(self) -> Path:
        return self.drivers[-1][0]

    def deploy(self, address: str, env: dict[str, str], options: dict[str, Any]) -> dict[str, Any]:
        """A new driver deploys; its first answer once 3 replicas run."""
        here = self.out / f"driver-{len(self.drivers)}"
        here.mkdir()
        args = [address, str(self.port), str(here), json.dumps(options)]
        proc = serve_traffic.spawn("deploy", args, env, here / "log")
        self.drivers.append((here, proc))
        self.asked = 0
        until(lambda: (here / "serving").exists() or proc.poll() is not None, SETTLE_S, "Serve deployed")
        if proc.poll() is not None:
            raise SystemExit(f"the deploying driver exited {proc.returncode}: {(here / 'log').read_text()[-3000:]}")
        return dict(json.loads((here / "serving").read_text()))

    def start_client(self, env: dict[str, str]) -> float:
        """The client started; when its first request was sent."""
        self.client = serve_traffic.spawn(
            "client", [str(self.port), str(self.client_dir), str(self.rate)], env, self.out / "client.log"
        )
        rows = until(lambda: serve_traffic.requests(self.client_dir), 60, "the client's first request", 0.1)
        return float(rows[0]["t"])

    def ask(self) -> dict[str, Any] | None:
        """Serve's status from the current driver, or None if it has exited."""
        here, proc = self.drivers[-1]
        n, self.asked = self.asked, self.asked + 1
        (here / f"ask-{n}").write_text("1")
        answer = here / f"answer-{n}.json"
        until(lambda: answer.exists() or proc.poll() is not None, 120, "the driver's answer", 0.1)
        return dict(json.loads(answer.read_text())) if answer.exists() else None

    def window(self, name: str, start: float, end: float) -> dict[str, Any]:
        """The requests sent in [start, end), once each has its answer."""
        until(lambda: serve_traffic.answered_before(self.client_dir, end), 60, "every request answered", 0.2)
        seen = serve_traffic.window(serve_traffic.requests(self.client_dir), start, end)
        failed = seen.pop("failed")
        errors = sorted({str(r.get("error") or r.get("status"))[:80] for r in failed})
        row = {"event": name, **seen, "failed": len(failed), "errors": errors[:3]}
        say(f"{name}: {row['seconds']} s, {row['requests']} requests, {row['failed']} failed")
        return row

    def stop(self, patient: bool) -> None:
        """The stop files written; the client and drivers waited for (the
        client's last requests time out after 30 s, a driver shuts Serve
        down), or, if not `patient` (an interrupted run), stopped by PID at once."""
        for here, _ in self.drivers:
            (here / "stop").write_text("1")
        (self.client_dir / "stop").write_text("1")
        procs = [self.client] if self.client is not None else []
        for proc, wait_s in [(p, 40) for p in procs] + [(p, 60) for _, p in self.drivers]:
            try:
                proc.wait(timeout=wait_s if patient else 0.1)
            except subprocess.TimeoutExpired:
                stop_popen(proc, signal.SIGTERM, grace_s=10)


def part_state(state_dir: Path, name: str) -> PartState | None:
    try:
        h = read_health(state_dir)
    except Exception:  # written by rename; a read that fails is tried again
        return None
    found = h.partition(name) if h is not None else None
    return found.state if found is not None else None


def run_partitioned(out: Path, steady_s: float, rate: float, every_event: bool) -> list[dict[str, Any]]:
    faults = out / "faults.json"
    write_faults(faults, {})
    start_args = ["--mode", "manual", "--manual", SPLIT, "--on-unhealthy", "shrink"]
    start_args += ["--drain-deadline", str(DRAIN_DEADLINE_S), "--health-interval", "0.5"]
    with CliCluster(PRESET, 4, start_args) as cluster:
        # Workers unpickle the deployment defined in tests/serve_traffic.py.
        cluster.env.update({FAULTS_ENV: str(faults), "PYTHONPATH": repo_pythonpath()})
        say(f"ray-accel: starting 4 partitions (state directory {cluster.state})")
        try:
            took = cluster.start(attempts=2)
        except StartFailed as e:
            raise SystemExit(f"ray-accel: {e}") from None
        say(f"ray-accel: 4 partitions up in {took:.1f} s")
        state_dir = Path(cluster.state)
        address = str(cluster.status["gcs_address"])
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAYACCEL_")}
        env.update(cluster.status["env"], RAY_ADDRESS=address, PYTHONPATH=repo_pythonpath())
        with Traffic(out / "ray-accel", free_port(), rate) as traffic:
            first = traffic.deploy(address, env, {"max_per_node": 1, "hold": "p3"})
            say(f"ray-accel: Serve deployed, replicas {first['replica_states']}")

            def settled(name: str, start: float) -> dict[str, Any]:
                """Once 3 replicas run, and nothing else, on partitions alive and serving or shrunk."""

                def placed() -> bool:
                    answer = traffic.ask()
                    if answer is None:
                        raise SystemExit(f"the driver exited: {(traffic.driver_dir / 'log').read_text()[-3000:]}")
                    if answer["replica_states"] != {"RUNNING": 3} or len(answer["replica_nodes"]) != 3:
                        return False
                    proc = cluster.cli("status", "--json")
                    if proc.returncode != 0:
                        return False
                    serving = {
                        p["node_id"]
                        for p in json.loads(proc.stdout)["partitions"]
                        if p["alive"] and (p.get("health") or {}).get("state") in ("serving", "shrunk")
                    }
                    return all(n in serving for n in answer["replica_nodes"])

                until(placed, SETTLE_S, f"{name}: 3 replicas placed again", every_s=1)
                return traffic.window(name, start, time.time())

            began = traffic.start_client(env) + 1  # the client's first second left out
            time.sleep(max(0.0, began + steady_s - time.time()))
            rows = [traffic.window("steady state", began, time.time())]

            t0 = time.time()
            write_faults(faults, {"lost": [LOST]})
            until(lambda: part_state(state_dir, "p1") is PartState.SHRUNK, SETTLE_S, "p1 shrunk", 0.2)
            rows.append(settled("device fault: p1 shrinks", t0))
            if every_event:
                t1 = time.time()
                done = cluster.cli(
                    "repartition", "--manual", MERGED, "--drain-deadline", str(DRAIN_DEADLINE_S), "--json"
                )
                if done.returncode != 0:
                    raise SystemExit(f"repartition failed ({done.returncode}): {done.stderr[-3000:]}")
                rows.append(settled(f'repartition "{MERGED}"', t1))

                t2 = time.time()
                write_faults(faults, {})
                until(lambda: part_state(state_dir, "p1") is not PartState.SHRUNK, SETTLE_S, "p1 restoring", 0.2)
                until(lambda: part_state(state_dir, "p1") is PartState.SERVING, SETTLE_S, "p1 whole again", 0.2)
                rows.append(settled("device returns: p1 whole", t2))
    say("ray-accel: stopped")
    return rows


class OneRaylet:
    """`ray start --head --block` with the whole host's cores, started again
    on `restart`; every `ray start` stopped by PID on leaving."""

    def __init__(self, scratch: Path) -> None:
        self.auth = auth.provide(auth.decide(os.environ, scratch, create=True), os.environ)
        self.env = {**os.environ, **self.auth.env(), "PYTHONPATH": repo_pythonpath()}
        self.proc: subprocess.Popen[bytes] | None = None
        self.address = ""

    def __enter__(self) -> OneRaylet:
        return self

    def __exit__(self, *exc: object) -> None:
        with shielded():
            self.stop()

    def start(self, cores: int) -> None:
        from ray.util import get_node_ip_address

        port = free_port()
        self.address = f"{get_node_ip_address()}:{port}"
        args = [str(BIN / "ray"), "start", "--head", "--block", "--disable-usage-stats", "--port", str(port)]
        args += ["--include-dashboard", "true", "--resources", json.dumps({"neuron_cores": cores})]
        self.proc = subprocess.Popen(
            args,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a terminal's Ctrl-C reaches the benchmark only
        )
        auth.apply(self.auth)
        proc = self.proc
        until(
            lambda: proc.poll() is not None or any(n.alive for n in (gcs_nodes(self.address, 2.0) or {}).values()),
            REGISTER_S,
            "the raylet registered",
            0.2,
        )
        if proc.poll() is not None:
            raise SystemExit(f"ray start exited {proc.returncode}")

    def stop(self) -> None:
        if self.proc is not None:
            stop_ray_starts([self.proc], self.address)
            self.proc = None

    def driver_env(self) -> dict[str, str]:
        return {**self.env, "RAY_ADDRESS": self.address}


def run_one_raylet(out: Path, steady_s: float, rate: float) -> list[dict[str, Any]]:
    with OneRaylet(out) as ray_node, Traffic(out / "one-raylet", free_port(), rate) as traffic:
        say(f"one raylet: starting, {HOST_CORES} NeuronCores")
        ray_node.start(HOST_CORES)
        traffic.deploy(ray_node.address, ray_node.driver_env(), {"max_per_node": None, "hold": None})
        say("one raylet: Serve deployed")
        began = traffic.start_client(ray_node.driver_env()) + 1
        time.sleep(max(0.0, began + steady_s - time.time()))
        rows = [traffic.window("steady state", began, time.time())]

        # The driver goes first (Serve's application is detached: it keeps
        # serving), so its exit is not counted in the restart's window.
        _, driver = traffic.drivers[-1]
        stop_popen(driver, signal.SIGTERM, grace_s=10)
        t0 = time.time()
        ray_node.stop()  # Ray, and Serve with it
        ray_node.start(HOST_CORES - 2)  # without neuron:5's 2 NeuronCores
        first = traffic.deploy(ray_node.address, ray_node.driver_env(), {"max_per_node": None, "hold": None})
        if first["replica_states"] != {"RUNNING": 3}:
            until(lambda: (traffic.ask() or {}).get("replica_states") == {"RUNNING": 3}, SETTLE_S, "3 replicas")
        rows.append(traffic.window("device fault: raylet restarted", t0, time.time()))
    say("one raylet: stopped")
    return rows


def ratio(value: float | None, steady: float | None) -> float | None:
    return None if value is None or not steady else value / steady


def with_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    steady = rows[0]
    for r in rows:
        r["vs_steady"] = {k: ratio(r[k], steady[k]) for k in ("ok_per_s", "p50_s", "p99_s")}
    return rows


RATIOS = ("OK/S RATIO", "P50 RATIO", "P99 RATIO")  # each to the same side's steady state


def ms(seconds: float | None) -> str | None:
    return None if seconds is None else f"{seconds * 1000:.0f} ms"


def times(x: float | None) -> str | None:
    return None if x is None else f"{x:.2f}x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steady", type=float, default=STEADY_S, help="seconds of steady state before the events")
    ap.add_argument("--rate", type=float, default=RATE, help="requests a second the client sends")
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_STEADY_S:g} s of steady state, the device fault only")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    steady_s = QUICK_STEADY_S if args.quick else args.steady
    if steady_s < 2 or args.rate <= 0:
        ap.error("--steady: at least 2 s; --rate: above 0")
    out = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    try:
        sides = {
            "ray-accel, 4 partitions": with_ratios(
                run_partitioned(out, steady_s, args.rate, every_event=not args.quick)
            ),
            "one raylet, no ray-accel": with_ratios(run_one_raylet(out, steady_s, args.rate)),
        }
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if args.json:
        print(json.dumps({"preset": PRESET, "rate": args.rate, "steady_s": steady_s, "sides": sides}, indent=2))
        return
    print(
        f"Serve on mock {PRESET} ({os.cpu_count()} cores): 3 replicas x 2 NeuronCores, {args.rate:g} requests/s "
        f"offered, one connection each; each event's figures as a ratio to the same side's steady state"
    )
    print(
        render(
            [*("SIDE", "WINDOW", "SECONDS", "SENT", "FAILED", "OK/S", "P50", "P99"), *RATIOS],
            [
                [
                    side,
                    r["event"],
                    f"{r['seconds']:.1f}",
                    r["requests"],
                    r["failed"],
                    f"{r['ok_per_s']:.1f}",
                    ms(r["p50_s"]),
                    ms(r["p99_s"]),
                    times(r["vs_steady"]["ok_per_s"]),
                    times(r["vs_steady"]["p50_s"]),
                    times(r["vs_steady"]["p99_s"]),
                ]
                for side, rows in sides.items()
                for r in rows
            ],
        )
    )
    for side, rows in sides.items():
        for r in rows:
            if r["errors"]:
                print(f"{side}, {r['event']}: failures such as {'; '.join(r['errors'])}")


if __name__ == "__main__":
    run_main(main)
