"""Test hosts on one machine: Linux network namespaces joined by a private bridge.

``HostSet(n)`` makes ``n`` hosts (2 or 3 in practice, at most 8) for real
multi-host Ray and ray-accel tests. Each `Host` has its own network namespace
and IP address, its own ``HOME``, ``TMPDIR`` and ray-accel state directory
(``RAYACCEL_STATE_DIR``), and a host name of its own. Use it through the
``hosts`` fixture in ``tests/multihost/conftest.py``.

Topology (names carry the run id ``mh<pid>s<k>``, unique per process and per set)::

    namespace <run>-sw   bridge br0, ports pa, pb, ... (one veth end per host)
    namespace <run>-a    lo up, eth0 = 10.213.<k>.10/24  (the other end of pa)
    namespace <run>-b    lo up, eth0 = 10.213.<k>.11/24  (the other end of pb)

Nothing is ever created in the root network namespace: each veth pair is made
inside the switch namespace with its peer placed straight into the host
namespace (``ip -n SW link add pa type veth peer name eth0 netns HOST``), and no
host namespace gets a default route. A process inside a host can reach loopback
and the other test hosts of its own set, nothing else; the root namespace
cannot reach the test subnet at all. Sets are isolated from each other (each
has its own switch), so parallel runs may even reuse an address.

Identity, as Ray and ray-accel see it:

- IP: ``Host.ip``. Ray names a node by its IP: pass ``--node-ip-address host.ip``.
- Host name: every command runs in a fresh UTS namespace (``unshare --uts``)
  whose host name is set to ``Host.hostname`` before the command is exec'd, so
  ``socket.gethostname()`` differs per host, or, with ``HostSet(n,
  hostname="ubuntu")``, is one name on every host (hosts then differ by IP only). This costs a few milliseconds per
  command and leaves nothing to clean up (a UTS namespace dies with its last
  process). The name does not resolve (no ``/etc/hosts`` entry is written, since
  that would mean editing the machine's ``/etc``): address hosts by IP.
- Files: ``HOME``, ``TMPDIR`` and ``RAYACCEL_STATE_DIR`` are per host. The
  filesystem itself is shared, so a test can also model a shared NFS home by
  giving two hosts the same ``HOME`` through ``env=``.

Commands (`Host.run`, `Host.spawn`) are run as::

    nsenter --net=/run/netns/<run>-a -- unshare --uts -- \\
        sh -c 'hostname "$0" && exec "$@"' <hostname> CMD...

Every stage exec's in place, so the PID seen by the harness is the command's own
PID; ``spawn`` also starts a new session, so its process group id is that PID.
The environment is clean: ``PATH`` (to find the venv's ``ray`` and ``python``),
the caller's ``PYTHONPATH``, ``LANG``, the host's ``HOME``/``TMPDIR``/state dir,
the shared Ray token (below), ``RAY_USAGE_STATS_ENABLED=0``, then ``env=``.

Ray token: the set writes one token (Ray's own generator) to a 0600 file,
``HostSet.token_path``, and every host gets ``RAY_AUTH_TOKEN_PATH`` pointing at it
and ``RAY_AUTH_MODE=token`` (a head turns token auth on by itself when the mode
is unset, a joining ``ray start`` does not). The token is never printed.

Teardown (`HostSet.close`: the fixture finalizer, an ``atexit`` guard, and a
SIGTERM handler that turns SIGTERM into KeyboardInterrupt so both run):

1. SIGTERM to every spawned process (the leader: Ray's ``ray start --block`` then
   stops its own children in order), up to ``stop_grace_s``, then SIGKILL to every
   spawned process group;
2. SIGKILL, by PID, to every process still inside one of the set's namespaces
   (found by the namespace inode in ``/proc/<pid>/ns/net``), e.g. a Ray worker that
   left its group;
3. delete the veths, the bridge and the namespaces; remove the run directory
   (kept when ``MULTIHOST_KEEP=1``, for reading Ray's logs after a failure).

If the hosts cannot be made (not root, ``ip``/``nsenter``/``unshare`` missing,
the kernel refuses a namespace) `HostSetupError` says why, and the test fails.

What Ray 2.60 needs inside the namespaces (found making the self-test pass):

- A joining ``ray start`` defaults its temp dir to the *head's* temp dir (from the
  head's node info), so pass ``--temp-dir <host.tmpdir>/ray`` on every host, or
  two hosts write their sessions and sockets into one directory.
- A driver finds its local raylet by scanning the machine's process table
  (``ray._private.services.find_node_ids``), which sees the raylets of every
  namespace; with no node IP it prefers the head. A driver on a non-head host must
  call ``ray.init(address, _node_ip_address=host.ip)``.
- Never run ``ray stop`` in a test: it kills raylets by process name across the
  whole machine (other hosts, other sessions). Stop what you spawned, by PID.
- Ports are per namespace: every host may use 6379 without a collision.

How a ray-accel test uses it::

    def test_two_hosts(hosts):
        a, b = hosts(2)
        mock = {"RAYACCEL_MOCK": "trn1.32xlarge"}
        head = a.run([CLI, "start", "--head", "--port", "6379", "--partitions", "2", "--json",
                      "--node-ip-address", a.ip, "--temp-dir", a.ray_temp_dir], env=mock, timeout=300)
        assert head.returncode == 0, head.stderr
        join = b.run([CLI, "start", "--address", f"{a.ip}:6379", "--partitions", "2", "--json",
                      "--node-ip-address", b.ip, "--temp-dir", b.ray_temp_dir], env=mock, timeout=300)
        ...   # each host has its own HOME and RAYACCEL_STATE_DIR and shares the token file
        b.run([CLI, "stop", "--json"])      # stops only host B's PIDs, from B's state dir
        a.run([CLI, "stop", "--json"])

``ray-accel start`` exits once its raylets run, so it is `Host.run`, not `spawn`;
the raylets it started are in the host's namespace, and teardown's namespace
sweep stops them if the test never reaches ``stop``.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

MAX_HOSTS = 8
NETNS_DIR = Path("/run/netns")
TEST_NET = "10.213"  # 10.213.<k>.0/24, only ever inside the set's namespaces
FIRST_HOST_OCTET = 10
# A unix socket path is at most 107 bytes (sun_path is 108 with the NUL). Ray puts
# its sockets at <temp dir>/session_<date>_<time>_<usec>_<pid>/sockets/<name>, about
# 70 bytes below the temp dir ("raylet.NN", "plasma_store"), so keep TMPDIR short.
MAX_TMPDIR_LEN = 36
ENV_KEEP = "MULTIHOST_KEEP"

_set_counter = itertools.count(1)


class HostSetupError(RuntimeError):
    """The namespaces or their network could not be made; the message says why."""


class HostTeardownError(RuntimeError):
    """Something the set made could not be removed; the message lists what."""


# --- the plan: pure data, no I/O ---------------------------------------------


@dataclass(frozen=True)
class HostPlan:
    name: str  # "a", "b", ...
    netns: str
    switch_port: str  # the veth end on the bridge, inside the switch namespace
    ip: str
    prefixlen: int
    hostname: str
    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def tmpdir(self) -> Path:
        return self.root / "tmp"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"


@dataclass(frozen=True)
class SetPlan:
    run_id: str
    switch_ns: str
    bridge: str
    subnet: str
    root: Path
    hosts: tuple[HostPlan, ...]

    @property
    def token_path(self) -> Path:
        return self.root / "ray_token"

    @property
    def namespaces(self) -> tuple[str, ...]:
        return (self.switch_ns, *(h.netns for h in self.hosts))


def make_run_id(pid: int, seq: int) -> str:
    """Unique per live process and per set in it: a namespace of this name that
    already exists was left by a dead process that had the same PID."""
    return f"mh{pid}s{seq}"


def plan_hosts(run_id: str, n: int, base: Path, subnet_octet: int, hostname: str | None = None) -> SetPlan:
    """`hostname` gives every host that one name (cloud images that all say
    `ubuntu`, containers started with one `--hostname`); by default each host
    has a name of its own."""
    if not 1 <= n <= MAX_HOSTS:
        raise ValueError(f"hosts: n={n} is outside 1..{MAX_HOSTS}")
    if not 0 <= subnet_octet <= 255:
        raise ValueError(f"hosts: subnet octet {subnet_octet} is outside 0..255")
    if not run_id or not all(c.isalnum() or c == "-" for c in run_id):
        raise ValueError(f"hosts: run id {run_id!r} must be letters, digits and '-'")
    if hostname is not None and not (0 < len(hostname) <= 64 and all(c.isalnum() or c in "-." for c in hostname)):
        raise ValueError(f"hosts: host name {hostname!r} must be 1 to 64 letters, digits, '-' and '.'")
    root = base / run_id
    hosts = []
    for i in range(n):
        name = chr(ord("a") + i)
        hosts.append(
            HostPlan(
                name=name,
                netns=f"{run_id}-{name}",
                switch_port=f"p{name}",
                ip=f"{TEST_NET}.{subnet_octet}.{FIRST_HOST_OCTET + i}",
                prefixlen=24,
                hostname=hostname or f"{run_id}-{name}",
                root=root / name,
            )
        )
    longest = max(len(str(h.tmpdir)) for h in hosts)
    if longest > MAX_TMPDIR_LEN:
        raise ValueError(
            f"hosts: base {str(base)!r} makes TMPDIR {longest} chars long (max {MAX_TMPDIR_LEN}); "
            "unix socket paths under it would pass 107 bytes"
        )
    return SetPlan(
        run_id=run_id,
        switch_ns=f"{run_id}-sw",
        bridge="br0",
        subnet=f"{TEST_NET}.{subnet_octet}.0/24",
        root=root,
        hosts=tuple(hosts),
    )


def setup_commands(plan: SetPlan) -> list[list[str]]:
    """`ip` argument lists, in order, after the namespaces exist. Every one names a
    namespace with ``-n``: none touches the root namespace's interfaces."""
    sw = plan.switch_ns
    cmds = [
        ["-n", sw, "link", "set", "lo", "up"],
        ["-n", sw, "link", "add", plan.bridge, "type", "bridge"],
        ["-n", sw, "link", "set", plan.bridge, "up"],
    ]
    for h in plan.hosts:
        cmds += [
            ["-n", sw, "link", "add", h.switch_port, "type", "veth", "peer", "name", "eth0", "netns", h.netns],
            ["-n", sw, "link", "set", h.switch_port, "master", plan.bridge],
            ["-n", sw, "link", "set", h.switch_port, "up"],
            ["-n", h.netns, "link", "set", "lo", "up"],
            ["-n", h.netns, "addr", "add", f"{h.ip}/{h.prefixlen}", "dev", "eth0"],
            ["-n", h.netns, "link", "set", "eth0", "up"],
        ]
    return cmds


def teardown_link_commands(plan: SetPlan) -> list[list[str]]:
    """Deleting a veth end deletes its peer; the namespaces go after these."""
    cmds = [["-n", plan.switch_ns, "link", "del", h.switch_port] for h in plan.hosts]
    return [*cmds, ["-n", plan.switch_ns, "link", "del", plan.bridge]]


def host_env(
    host: HostPlan, token_path: Path, caller: Mapping[str, str], extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A clean environment for a command on `host` (see the module doc)."""
    env = {
        "PATH": caller.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "HOME": str(host.home),
        "TMPDIR": str(host.tmpdir),
        "RAYACCEL_STATE_DIR": str(host.state_dir),
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token_path),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    if caller.get("PYTHONPATH"):
        env["PYTHONPATH"] = caller["PYTHONPATH"]
    env.update(extra or {})
    return env


def wrap_command(netns_path: Path, hostname: str, argv: Sequence[str], tools: Tools) -> list[str]:
    return [
        tools.nsenter,
        f"--net={netns_path}",
        "--",
        tools.unshare,
        "--uts",
        "--",
        "sh",
        "-c",
        'hostname "$0" && exec "$@"',
        hostname,
        *argv,
    ]


# --- the I/O edge --------------------------------------------------------------


@dataclass(frozen=True)
class Tools:
    ip: str
    nsenter: str
    unshare: str


def find_tools(ip: str = "ip") -> Tools:
    """Resolve the binaries, or say which is missing."""
    if os.geteuid() != 0:
        raise HostSetupError(f"network namespaces need root; running as euid {os.geteuid()}")
    found: dict[str, str] = {}
    for key, name, package in (
        ("ip", ip, "iproute2"),
        ("nsenter", "nsenter", "util-linux"),
        ("unshare", "unshare", "util-linux"),
    ):
        path = shutil.which(name)
        if path is None:
            raise HostSetupError(
                f"cannot make test hosts: `{name}` not found (install {package}, e.g. apt-get install -y {package})"
            )
        found[key] = path
    if shutil.which("hostname") is None:
        raise HostSetupError("cannot make test hosts: `hostname` not found (install hostname)")
    return Tools(**found)


def _netns_inode(name: str) -> int | None:
    try:
        return (NETNS_DIR / name).stat().st_ino
    except OSError:
        return None


def pids_in_netns(inodes: set[int]) -> list[int]:
    """Live (non-zombie) processes whose network namespace is one of `inodes`."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ino = os.stat(f"/proc/{entry}/ns/net").st_ino
            if ino not in inodes:
                continue
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # exited meanwhile, or a kernel thread
        if state not in ("Z", "X"):
            out.append(int(entry))
    return out


def pid_alive(pid: int) -> bool:
    """True for a live, non-zombie process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _kill(pid: int, sig: int, group: bool = False) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        (os.killpg if group else os.kill)(pid, sig)


def _wait_gone(pids: Sequence[int], timeout: float, reap: Sequence[subprocess.Popen[bytes]] = ()) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        for p in reap:
            p.poll()
        left = [p for p in pids if pid_alive(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


@dataclass
class Proc:
    """A long-lived process started by `Host.spawn`; its process group is its PID."""

    host: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def pgid(self) -> int:
        return self.popen.pid  # start_new_session=True

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as e:
            return f"(no log: {e})"


class Host:
    """One test host. Commands run inside its namespace (see the module doc)."""

    def __init__(self, plan: HostPlan, owner: HostSet) -> None:
        self.plan = plan
        self._owner = owner
        self.name = plan.name
        self.netns = plan.netns
        self.ip = plan.ip
        self.hostname = plan.hostname
        self.home = plan.home
        self.tmpdir = plan.tmpdir
        self.state_dir = plan.state_dir

    @property
    def ray_temp_dir(self) -> str:
        """Pass as ``--temp-dir`` to every ``ray start`` on this host."""
        return str(self.plan.tmpdir / "ray")

    def __repr__(self) -> str:
        return f"Host({self.name}, {self.ip}, netns={self.netns})"

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return host_env(self.plan, self._owner.plan.token_path, os.environ, extra)

    def command(self, argv: Sequence[str]) -> list[str]:
        return wrap_command(NETNS_DIR / self.netns, self.hostname, argv, self._owner.tools)

    def run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout: float = 120,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv` to completion inside the host; output captured as text.
        On timeout the whole process group is killed and TimeoutExpired raised."""
        self._owner.require_open()
        proc = subprocess.Popen(
            self.command(argv),
            env=self.env(env),
            cwd=self.home,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except BaseException:
            _kill(proc.pid, signal.SIGKILL, group=True)
            proc.communicate()
            raise
        return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)

    def spawn(self, argv: Sequence[str], env: Mapping[str, str] | None = None, label: str | None = None) -> Proc:
        """Start a long-lived `argv` inside the host, in a session of its own, with
        stdout and stderr to a log file; teardown stops its process group."""
        self._owner.require_open()
        log_dir = self.plan.root / "logs"
        log_dir.mkdir(exist_ok=True)
        stem = label or Path(argv[0]).name
        log_path = log_dir / f"{stem}.{len(self._owner.procs)}.log"
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                self.command(argv),
                env=self.env(env),
                cwd=self.home,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc = Proc(self.name, list(argv), log_path, popen)
        self._owner.procs.append(proc)
        return proc

    def wait_tcp(self, ip: str, port: int, timeout: float = 60) -> None:
        """Wait until `ip:port` accepts a TCP connection as seen from this host."""
        probe = (
            "import socket,sys,time\n"
            "end=time.monotonic()+float(sys.argv[3])\n"
            "while True:\n"
            "    try:\n"
            "        socket.create_connection((sys.argv[1],int(sys.argv[2])),1).close(); break\n"
            "    except OSError:\n"
            "        if time.monotonic()>end: sys.exit(f'{sys.argv[1]}:{sys.argv[2]} not reachable')\n"
            "        time.sleep(0.1)\n"
        )
        proc = self.run([sys.executable, "-c", probe, ip, str(port), str(timeout)], timeout=timeout + 30)
        if proc.returncode != 0:
            raise TimeoutError(f"from host {self.name}: {proc.stderr.strip()}")


_live_sets: list[HostSet] = []
_live_lock = threading.Lock()
_guards_installed = False


def _close_live_sets() -> None:
    for hs in list(_live_sets):
        with contextlib.suppress(Exception):
            hs.close()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    # KeyboardInterrupt lets pytest run the fixture finalizers; atexit backs it up.
    raise KeyboardInterrupt(f"signal {signum}")


def _install_guards() -> None:
    global _guards_installed
    if _guards_installed:
        return
    atexit.register(_close_live_sets)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
    _guards_installed = True


class HostSet:
    """`n` hosts, made by `start()` (or ``with``) and removed by `close()`."""

    def __init__(
        self,
        n: int,
        *,
        ip: str = "ip",
        base: Path = Path("/tmp"),
        run_id: str | None = None,
        stop_grace_s: float = 20.0,
        hostname: str | None = None,
    ) -> None:
        seq = next(_set_counter)
        self.plan = plan_hosts(run_id or make_run_id(os.getpid(), seq), n, base, seq % 256, hostname)
        self._ip_name = ip
        self.stop_grace_s = stop_grace_s
        self.tools: Tools = Tools(ip, "nsenter", "unshare")
        self.hosts: list[Host] = [Host(h, self) for h in self.plan.hosts]
        self.procs: list[Proc] = []
        self.netns_inodes: dict[str, int] = {}
        self._made_netns: list[str] = []
        self._made_root = False
        self._started = False  # close() has work to do
        self._open = False  # run/spawn allowed
        self._closed = False
        # What close() had to do, for tests and reports: PIDs that were still alive
        # after the spawned groups were stopped and had to be killed by namespace.
        self.swept_pids: list[int] = []

    @property
    def token_path(self) -> Path:
        return self.plan.token_path

    def __enter__(self) -> HostSet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def require_open(self) -> None:
        if not self._open:
            raise RuntimeError(f"host set {self.plan.run_id} is not started or already closed")

    def _ip(self, args: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        try:
            proc = subprocess.run([self.tools.ip, *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            proc = subprocess.CompletedProcess([self.tools.ip, *args], 127, "", str(e))
        if check and proc.returncode != 0:
            raise HostSetupError(f"`ip {' '.join(args)}` failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def start(self) -> HostSet:
        _install_guards()
        with _live_lock:
            _live_sets.append(self)
        self._started = True
        try:
            self.tools = find_tools(self._ip_name)
            self._make_dirs()
            for ns in self.plan.namespaces:
                self._remove_stale_netns(ns)
                self._ip(["netns", "add", ns])
                self._made_netns.append(ns)
                ino = _netns_inode(ns)
                if ino is None:
                    raise HostSetupError(f"`ip netns add {ns}` left no {NETNS_DIR / ns}")
                self.netns_inodes[ns] = ino
            for args in setup_commands(self.plan):
                self._ip(args)
        except BaseException:
            with contextlib.suppress(Exception):
                self.close()  # everything made so far
            raise
        self._open = True
        return self

    def _make_dirs(self) -> None:
        root = self.plan.root
        if root.exists():  # left by a dead process that had this PID
            shutil.rmtree(root)
        root.mkdir(mode=0o700, parents=True)
        self._made_root = True
        for h in self.plan.hosts:
            for d in (h.root, h.home, h.tmpdir, h.state_dir):
                d.mkdir(mode=0o700, exist_ok=True)
        from ray._private.authentication.authentication_token_generator import generate_new_authentication_token

        fd = os.open(self.plan.token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(generate_new_authentication_token())

    def _remove_stale_netns(self, ns: str) -> None:
        """The run id holds our live PID, so a namespace of this name is from a dead
        process that had the same PID: stop what is left in it, then delete it."""
        ino = _netns_inode(ns)
        if ino is None:
            return
        left = pids_in_netns({ino})
        for pid in left:
            _kill(pid, signal.SIGKILL)
        _wait_gone(left, 5)
        self._ip(["netns", "del", ns])

    def leftovers(self) -> dict[str, list[str] | list[int]]:
        """What of this set still exists: namespaces, and live processes that were
        spawned or still sit in one of its namespaces."""
        ours = sorted(n for n in self.plan.namespaces if (NETNS_DIR / n).exists())
        pids = {p.pid for p in self.procs if pid_alive(p.pid)} | set(pids_in_netns(set(self.netns_inodes.values())))
        return {"namespaces": ours, "pids": sorted(pids)}

    def close(self) -> None:
        """Stop every process, remove every link, namespace and directory made.
        Safe to call again, also after an interrupted close (each step is
        idempotent); raises HostTeardownError listing what stayed."""
        if self._closed or not self._started:
            return
        self._open = False
        problems: list[str] = []
        # 1. SIGTERM each spawned leader, not its group: `ray start --block` then stops
        # its children in order (~1.5 s); a group-wide SIGTERM kills them all at once
        # and it waits ~30 s on its dying children. Then SIGKILL what the groups hold.
        for p in reversed(self.procs):
            if p.alive():
                _kill(p.pid, signal.SIGTERM)
        popens = [p.popen for p in self.procs]
        left = _wait_gone([p.pid for p in self.procs], self.stop_grace_s, popens)
        for p in self.procs:
            _kill(p.pgid, signal.SIGKILL, group=True)
        left = _wait_gone(left, 5, popens)
        if left:
            problems.append(f"spawned PIDs still alive after SIGKILL: {left}")
        # 2. anything else inside our namespaces, by PID
        inodes = set(self.netns_inodes.values())
        stray = pids_in_netns(inodes)
        self.swept_pids = list(stray)
        for pid in stray:
            _kill(pid, signal.SIGKILL)
        stray = _wait_gone(stray, 5)
        if stray:
            problems.append(f"PIDs still inside the namespaces after SIGKILL: {stray}")
        # 3. links, then namespaces, then files
        if self.plan.switch_ns in self._made_netns:
            for args in teardown_link_commands(self.plan):
                self._ip(args, check=False)  # absent if its peer namespace went first
        for ns in reversed(self._made_netns):
            proc = self._ip(["netns", "del", ns], check=False)
            if proc.returncode != 0 and (NETNS_DIR / ns).exists():
                problems.append(f"`ip netns del {ns}`: {proc.stderr.strip()}")
        if self._made_root and os.environ.get(ENV_KEEP) != "1":
            shutil.rmtree(self.plan.root, ignore_errors=True)
        self._closed = True
        with _live_lock:
            if self in _live_sets:
                _live_sets.remove(self)
        if problems:
            raise HostTeardownError(f"host set {self.plan.run_id}: " + "; ".join(problems))


class Hosts:
    """Callable fixture value: ``hosts(n)``; ``hosts.close()`` tears down early, so a
    test can assert on what is left (``hosts.sets[i].leftovers()``)."""

    def __init__(self) -> None:
        self.sets: list[HostSet] = []

    def __call__(self, n: int, hostname: str | None = None) -> list[Host]:
        hs = HostSet(n, ip=os.environ.get("MULTIHOST_IP", "ip"), hostname=hostname)
        self.sets.append(hs)
        hs.start()  # HostSetupError propagates: the test fails with the reason
        return hs.hosts

    def close(self) -> None:
        errors = []
        for hs in reversed(self.sets):
            try:
                hs.close()
            except Exception as e:
                errors.append(str(e))
        assert not errors, "; ".join(errors)
