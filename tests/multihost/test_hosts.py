"""Self-tests of the multi-host harness: real namespaces, real processes, real Ray.

Every test here needs root and iproute2; without them they fail with the reason.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_process import sigint_as_default
from tests.multihost.hosts import NETNS_DIR, TEST_NET, Hosts, HostSet, HostSetupError, pid_alive, pids_in_netns

pytestmark = pytest.mark.multihost

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).parent / "ray")
GCS_PORT = 6379  # ports are per namespace: no other Ray on the machine can hold it
RAY_SMALL = ["--num-cpus", "1", "--object-store-memory", str(200 * 10**6), "--disable-usage-stats", "--block"]

ECHO_SERVER = """
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 7000))
s.listen()
while True:
    c, _ = s.accept()
    try:
        c.sendall(socket.gethostname().encode())
    except OSError:
        pass
    c.close()
"""

ASK_SERVER = """
import socket, sys
c = socket.create_connection((sys.argv[1], 7000), 5)
print(c.recv(100).decode())
"""


def netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def assert_nothing_left(hs: HostSet, pids: list[int]) -> None:
    left = netns_names() & set(hs.plan.namespaces)
    assert not left, f"namespaces left: {left}"
    assert not [n for n in hs.plan.namespaces if (NETNS_DIR / n).exists()]
    alive = [p for p in pids if pid_alive(p)]
    assert not alive, f"PIDs left: {alive}"
    assert hs.leftovers() == {"namespaces": [], "pids": []}
    assert not hs.plan.root.exists()


def test_hosts_have_own_address_name_and_dirs(hosts: Hosts) -> None:
    a, b, c = hosts(3)
    assert len({a.ip, b.ip, c.ip}) == 3 and all(h.ip.startswith(TEST_NET + ".") for h in (a, b, c))
    for h in (a, b, c):
        env = dict(line.split("=", 1) for line in h.run(["env"]).stdout.splitlines())
        assert env["HOME"] == str(h.home) and env["TMPDIR"] == str(h.tmpdir)
        assert env["RAYACCEL_STATE_DIR"] == str(h.state_dir)
        assert env["RAY_AUTH_TOKEN_PATH"] == str(hosts.sets[0].token_path)
        assert env.get("PYTHONPATH") == os.environ.get("PYTHONPATH")
        assert not {k for k in env if k.startswith("PYTEST")}, "the caller's environment leaked in"
        assert h.run(["hostname"]).stdout.strip() == h.hostname
        addrs = h.run(["ip", "-4", "-o", "addr", "show"]).stdout
        assert f"{h.ip}/24" in addrs and "127.0.0.1/8" in addrs
    assert len({a.hostname, b.hostname, c.hostname}) == 3
    token = hosts.sets[0].token_path
    assert token.stat().st_mode & 0o777 == 0o600 and len(token.read_text()) == 64

    server = a.spawn([sys.executable, "-c", ECHO_SERVER], label="echo")
    c.wait_tcp(a.ip, 7000, timeout=20)
    got = c.run([sys.executable, "-c", ASK_SERVER, a.ip], timeout=30)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == a.hostname  # answered from inside host A
    assert server.alive()


def test_test_subnet_exists_only_inside_the_namespaces(hosts: Hosts) -> None:
    a, b = hosts(2)
    root_addrs = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
    assert TEST_NET + "." not in root_addrs
    for h in (a, b):
        routes = h.run(["ip", "-4", "route", "show"]).stdout.split("\n")
        assert [r.split()[0] for r in routes if r.strip()] == [hosts.sets[0].plan.subnet]
        # a route lookup only, no packet: the root namespace's address has no route
        lookup = h.run(["ip", "route", "get", "192.0.2.2"])
        assert lookup.returncode != 0 and "unreachable" in lookup.stderr


@pytest.mark.ray
def test_two_host_ray_cluster(hosts: Hosts) -> None:
    t0 = time.monotonic()
    a, b = hosts(2)
    hs = hosts.sets[0]
    head_args = ["--head", "--port", str(GCS_PORT), "--include-dashboard=false"]
    head = a.spawn(
        [RAY, "start", *head_args, "--node-ip-address", a.ip, "--temp-dir", a.ray_temp_dir, *RAY_SMALL],
        label="ray-head",
    )
    a.wait_tcp(a.ip, GCS_PORT, timeout=90)
    join_args = ["--address", f"{a.ip}:{GCS_PORT}"]
    worker = b.spawn(
        [RAY, "start", *join_args, "--node-ip-address", b.ip, "--temp-dir", b.ray_temp_dir, *RAY_SMALL],
        label="ray-b",
    )
    driver = a.run(
        [sys.executable, str(ROOT / "tests/multihost/ray_driver.py"), f"{a.ip}:{GCS_PORT}", b.ip], timeout=240
    )
    assert driver.returncode == 0, f"{driver.stderr[-3000:]}\nhead: {head.log_tail()}\nb: {worker.log_tail()}"
    seen = json.loads(driver.stdout.strip().splitlines()[-1])
    assert sorted(seen["alive"]) == sorted([a.ip, b.ip])
    assert seen["driver_ip"] == a.ip
    ip, hostname, node_id = seen["task"]
    assert (ip, hostname, node_id) == (b.ip, b.hostname, seen["alive"][b.ip])
    assert Path(b.ray_temp_dir).is_dir() and Path(a.ray_temp_dir).is_dir()

    inside = pids_in_netns(set(hs.netns_inodes.values()))  # raylets, GCS, agents, workers
    assert {head.pid, worker.pid} <= set(inside) and len(inside) > 4
    t_close = time.monotonic()
    hosts.close()
    assert_nothing_left(hs, [head.pid, worker.pid, *inside])
    print(
        f"\ntwo-host Ray: up and task on B in {t_close - t0:.1f}s, teardown {time.monotonic() - t_close:.1f}s, "
        f"{len(inside)} processes in the namespaces, {len(hs.swept_pids)} left their group (killed by namespace)"
    )


def test_teardown_after_a_failing_body() -> None:
    with pytest.raises(RuntimeError, match="body failed"), HostSet(2) as hs:
        sleeper = hs.hosts[1].spawn(["sleep", "300"])
        hs.hosts[0].run(["sh", "-c", "sleep 300 >/dev/null 2>&1 &"])  # a stray outside any recorded group
        raise RuntimeError("body failed")
    assert_nothing_left(hs, [sleeper.pid])


def test_missing_ip_binary_fails_with_the_reason(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-ip"
    hs = HostSet(2, ip=str(missing))
    with pytest.raises(HostSetupError, match=f"`{missing}` not found"):
        hs.start()
    assert_nothing_left(hs, [])


def test_kernel_refusal_fails_with_the_reason(tmp_path: Path) -> None:
    # A real refusal: `ip` in a user namespace has no CAP_SYS_ADMIN over /run/netns.
    ip = tmp_path / "ip"
    ip.write_text(f'#!/bin/sh\nexec unshare --user {subprocess.getoutput("command -v ip")} "$@"\n')
    ip.chmod(0o755)
    hs = HostSet(2, ip=str(ip))
    with pytest.raises(HostSetupError, match="netns add .* Operation not permitted"):
        hs.start()
    assert_nothing_left(hs, [])


def test_fixture_fails_not_skips_without_namespaces(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text("from tests.multihost.conftest import hosts  # noqa: F401\n")
    (tmp_path / "test_uses_hosts.py").write_text("def test_two(hosts):\n    hosts(2)\n")
    env = {**os.environ, "MULTIHOST_IP": "/nonexistent/ip", "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout
    assert "1 failed" in proc.stdout and "skipped" not in proc.stdout
    assert "`/nonexistent/ip` not found" in proc.stdout


def test_stale_namespace_of_the_same_name_does_not_break_setup() -> None:
    run_id = f"mh{os.getpid()}st"
    stale_ns = f"{run_id}-a"
    subprocess.run(["ip", "netns", "add", stale_ns], check=True)
    stale = subprocess.Popen(["nsenter", f"--net={NETNS_DIR / stale_ns}", "sleep", "300"], start_new_session=True)
    try:
        ino = (NETNS_DIR / stale_ns).stat().st_ino
        deadline = time.monotonic() + 10
        while stale.pid not in pids_in_netns({ino}) and time.monotonic() < deadline:
            time.sleep(0.05)
        Path(f"/tmp/{run_id}/a").mkdir(parents=True)  # and its directory, as a crash leaves them
        with HostSet(2, run_id=run_id) as hs:
            assert hs.netns_inodes[stale_ns] != ino
            assert stale.wait(timeout=10) == -signal.SIGKILL  # the dead run's process was stopped
            assert hs.hosts[0].run(["hostname"]).stdout.strip() == hs.hosts[0].hostname
        assert_nothing_left(hs, [stale.pid])
    finally:
        if stale.poll() is None:
            stale.kill()
            stale.wait()
        subprocess.run(["ip", "netns", "del", stale_ns], capture_output=True)


GUARDED = """
import json, sys, time
from tests.multihost.hosts import HostSet
hs = HostSet(2).start()
p = hs.hosts[1].spawn(["sleep", "300"])
print(json.dumps({"namespaces": hs.plan.namespaces, "pid": p.pid,
                  "inodes": sorted(hs.netns_inodes.values()), "root": str(hs.plan.root)}), flush=True)
if sys.argv[1] == "exit":
    sys.exit(3)
time.sleep(300)
"""


@pytest.mark.parametrize("how", ["exit", "sigterm"])
def test_guard_tears_down_when_the_process_ends_without_close(how: str) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-c", GUARDED, how], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        made = json.loads(proc.stdout.readline())
        assert pid_alive(made["pid"])
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not netns_names() & set(made["namespaces"])
    assert not pid_alive(made["pid"]) and not pids_in_netns(set(made["inodes"]))
    assert not Path(made["root"]).exists()


INTERRUPTED_TEST = """
import json, os, time
from pathlib import Path

def test_interrupted(hosts):
    a, b = hosts(2)
    p = b.spawn(["sleep", "300"])
    hs = hosts.sets[0]
    made = {"namespaces": hs.plan.namespaces, "pid": p.pid,
            "inodes": sorted(hs.netns_inodes.values()), "root": str(hs.plan.root)}
    # Renamed into place: the outer test polls for the file and must never
    # read it half written.
    tmp = Path(os.environ["MADE_FILE"] + ".tmp")
    tmp.write_text(json.dumps(made))
    os.replace(tmp, os.environ["MADE_FILE"])
    time.sleep(300)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_pytest_run_leaves_nothing(tmp_path: Path, sig: signal.Signals) -> None:
    (tmp_path / "conftest.py").write_text("from tests.multihost.conftest import hosts  # noqa: F401\n")
    (tmp_path / "test_interrupted.py").write_text(INTERRUPTED_TEST)
    made_file = tmp_path / "made.json"
    env = {**os.environ, "MADE_FILE": str(made_file), "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=sigint_as_default,
    )
    try:
        deadline = time.monotonic() + 60
        while not made_file.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert made_file.exists(), proc.communicate(timeout=30)[0] if proc.poll() is not None else "no hosts in 60 s"
        made = json.loads(made_file.read_text())
        assert pid_alive(made["pid"])
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            # This test failed before its own signal: let the inner run's
            # teardown remove its hosts (SIGTERM runs it), SIGKILL would leak them.
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert proc.returncode != 0, out
    assert not netns_names() & set(made["namespaces"]), out
    assert not pid_alive(made["pid"]) and not pids_in_netns(set(made["inodes"])), out
    assert not Path(made["root"]).exists()
