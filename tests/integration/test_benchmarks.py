"""The benchmarks stop what they start: `bench_startup.py --quick`
interrupted while its first cluster is up leaves no Ray process behind.

The benchmark runs with a tag in its environment (`tests.tagged`), which
`ray-accel start` and every Ray process below it inherit, so "nothing left"
is exact whatever else runs on the machine; the raylet and GCS PIDs before
and after, and the benchmark's own session, are checked as well.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.cli_process import ROOT, repo_pythonpath, sigint_as_default
from tests.integration.cluster_harness import ray_processes
from tests.tagged import new_tag, wait_none_tagged

pytestmark = pytest.mark.ray

RAY_DAEMONS = ("raylet", "gcs_server")


def ray_daemons() -> set[int]:
    """PIDs of the live raylets and GCS servers of this network namespace."""
    return ray_processes(RAY_DAEMONS)


def session_members(sid: int) -> list[int]:
    """Live processes of session `sid` (field 6 of /proc/<pid>/stat)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            out.append(int(entry))
    return out


def test_bench_startup_interrupted_with_a_cluster_up_stops_it(tmp_path: Path) -> None:
    tag = new_tag()
    before = ray_daemons()
    env = {**os.environ, **tag, "PYTHONPATH": repo_pythonpath()}
    bench = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "bench_startup.py"), "--quick"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its session: what it leaves there is checked below
        preexec_fn=sigint_as_default,
    )
    err: list[str] = []
    out: list[str] = []
    pumps = [
        threading.Thread(target=lambda s=s, sink=sink: sink.extend(s), daemon=True)
        for s, sink in ((bench.stderr, err), (bench.stdout, out))
    ]
    for t in pumps:
        t.start()
    try:
        deadline = time.monotonic() + 300
        while not any("partitions up in" in line for line in err):
            assert bench.poll() is None, f"exited {bench.returncode} before a cluster was up: {''.join(err)[-3000:]}"
            assert time.monotonic() < deadline, f"no cluster up within 300 s: {''.join(err)[-3000:]}"
            time.sleep(0.05)
        up = ray_daemons() - before
        assert up, "a cluster is up, so its raylets and GCS run"
        os.kill(bench.pid, signal.SIGINT)
        code = bench.wait(timeout=240)
    finally:
        if bench.poll() is None:
            bench.send_signal(signal.SIGTERM)  # the same path as SIGINT: it stops its cluster
            bench.wait(timeout=240)
    for t in pumps:
        t.join(timeout=10)
    stderr = "".join(err)
    assert code == 130, stderr[-3000:]
    assert "interrupted (SIGINT): stopped what this run started" in stderr
    assert "Traceback" not in stderr, stderr[-3000:]
    assert not out, "no table after an interrupted run"
    assert wait_none_tagged(tag, timeout_s=30) == {}
    deadline = time.monotonic() + 30
    while (left := (ray_daemons() - before) & up) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"raylets or GCS servers it started are still alive: {sorted(left)}"
    assert session_members(bench.pid) == []
    # Stopped first, then its state directory removed (never the other way round).
    states = re.findall(r"state directory (\S+)\)", stderr)
    assert states, stderr[-3000:]
    assert not any(Path(s).exists() for s in states), states
