"""Bad input on the cluster side, at the command line, without starting Ray.

What a command must never do with bad input or a state record it cannot
trust: signal a process it did not start, start a cluster, write outside the
state directory, change the directory's mode, or change state before
refusing. Processes are real: a stand-in for a raylet is `sleep` run under
the path Ray's raylet binary has (``ray/core/src/ray/raylet/raylet``, from
``ray/_private/services.py``'s `start_raylet`), so its command line is a
raylet's as /proc shows it; everything a test starts carries its own tag
(`tests.tagged`) and is killed by PID at the end. Commands run through the
CLI's entry function in this process (`tests.clirun`), except where a hang
is what is tested: those run the console script under a timeout.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from ray_accel.cluster import statedir
from ray_accel.cluster.auth import Auth
from ray_accel.cluster.host import port_blocks
from ray_accel.cluster.procs import Verdict, check
from ray_accel.cluster.record import HostRecord, PartitionEntry, RayProcess, dumps
from ray_accel.core.errors import InputError
from ray_accel.core.hosts import ip_text
from ray_accel.core.processes import read_cmdline
from tests.badinput import badinput
from tests.bridge_specs import NEURON
from tests.cli_process import run_cli
from tests.clirun import run_cli_here
from tests.stand_ins import LOOPBACK, RAYLET_PATH, ray_process
from tests.tagged import new_tag, tagged

SPEC = NEURON  # the Trainium host of tests/bridge_specs.py


@pytest.fixture
def tag() -> dict[str, str]:
    return new_tag()


@pytest.fixture
def env(tmp_path: Path, tag: dict[str, str]) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return {
        "RAYACCEL_MOCK": "trn1.32xlarge",
        "RAYACCEL_STATE_DIR": str(tmp_path / "state"),
        "HOME": str(home),
        "RAY_AUTH_MODE": "",
        "RAY_AUTH_TOKEN": "",
        "RAY_AUTH_TOKEN_PATH": "",
        **tag,
    }


Spawn = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def spawn(tmp_path: Path, tag: dict[str, str]) -> Iterator[Spawn]:
    """Start `sleep` as a stand-in raylet (`as_raylet`) or as itself."""
    fake = tmp_path / "site-packages" / RAYLET_PATH
    fake.parent.mkdir(parents=True)
    os.symlink(shutil.which("sleep") or "/bin/sleep", fake)
    started: list[subprocess.Popen[bytes]] = []

    def run(as_raylet: bool = True, child: bool = False) -> subprocess.Popen[bytes]:
        exe = str(fake) if as_raylet else "sleep"
        # With `child`, the stand-in runs a sleep of its own below it, as a raylet runs workers.
        cmd = ["sh", "-c", f'"{exe}" 600 & exec "{exe}" 601'] if child else [exe, "600"]
        p = subprocess.Popen(cmd, env={**os.environ, **tag})
        started.append(p)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            argv = read_cmdline(p.pid) or []
            if argv[:1] == [exe] and (not child or psutil.Process(p.pid).children()):
                break
            time.sleep(0.02)
        return p

    yield run
    for p in started:
        p.kill()
        p.wait()
    for pid in tagged(tag):
        os.kill(pid, 9)  # our own tagged sleeps only


def write_record(
    env: dict[str, str],
    *parts: tuple[RayProcess, ...],
    host: str | None = None,
    ip: str | None = LOOPBACK,
    path: Path | None = None,
) -> bytes:
    """A joining host's record (no GCS of its own) with one partition per
    `parts`, for node IP `ip` (None: an earlier version's record, by name
    alone), in RAYACCEL_STATE_DIR (or at `path`)."""
    blocks = port_blocks(41000, [184] * len(parts))
    entries = tuple(
        PartitionEntry(
            name=f"p{i}",
            device_ids=(f"neuron:{2 * i}",),
            core_ids=(4 * i, 4 * i + 1),
            head=False,
            ports=blocks[i],
            processes=procs,
        )
        for i, procs in enumerate(parts)
    )
    record = HostRecord(
        host=host or statedir.host_name(),
        host_ip=ip,
        created=1.0,
        head=False,
        mode="auto-split",
        spec=SPEC,
        ray_args=(),
        gcs_address="127.0.0.1:1",
        gcs_port=None,
        auth=Auth("disabled", None, "test"),
        partitions=entries,
    )
    if path is None:
        path = Path(env["RAYACCEL_STATE_DIR"]) / ("host.json" if ip is not None else "node.json")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    raw = dumps(record).encode()
    path.write_bytes(raw)
    return raw


def state_bytes(env: dict[str, str]) -> bytes | None:
    path = Path(env["RAYACCEL_STATE_DIR"]) / "host.json"
    return path.read_bytes() if path.exists() else None


def assert_clean_error(proc: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)


# ------------------------------------------------ never signal what is not ours


def test_verdicts_of_the_process_check(spawn: Spawn) -> None:
    raylet = spawn()
    other = spawn(as_raylet=False)
    assert check(ray_process(raylet)).verdict is Verdict.OURS
    assert check(ray_process(1)).verdict is Verdict.FOREIGN
    assert check(ray_process(os.getpid())).verdict is Verdict.FOREIGN
    assert check(ray_process(os.getppid())).verdict is Verdict.FOREIGN, "an ancestor"
    foreign = check(ray_process(other, identity=ray_process(raylet).identity))
    assert foreign.verdict is Verdict.FOREIGN and "command line is 'sleep 600'" in foreign.reason
    assert check(ray_process(other)).verdict is Verdict.FOREIGN, "sleep is not Ray's raylet"
    assert check(ray_process(raylet, kind="gcs_server")).verdict is Verdict.FOREIGN, "a raylet is not a GCS"
    reused = ray_process(raylet, start_ticks=ray_process(raylet).start_ticks - 1)
    assert check(reused).verdict is Verdict.GONE, "a reused PID names a younger process: the recorded one is gone"
    recorded = ray_process(raylet)
    raylet.kill()
    raylet.wait()
    assert check(recorded).verdict is Verdict.GONE


FOREIGN_CASES = ["pid-1", "test-process", "other-command-line", "not-ray"]


def foreign_entry(case: str, spawn: Spawn) -> tuple[RayProcess, subprocess.Popen[bytes] | None]:
    if case == "pid-1":
        return ray_process(1, identity="/x/" + RAYLET_PATH), None
    if case == "test-process":
        return ray_process(os.getpid(), identity="/x/" + RAYLET_PATH), None
    other = spawn(as_raylet=False)
    if case == "other-command-line":
        # The right start time, but the program is sleep, not the raylet recorded.
        return ray_process(other, identity="/x/site-packages/" + RAYLET_PATH), other
    return ray_process(other), other  # the record itself says "sleep": not a Ray process


@badinput("dangerous")
@pytest.mark.parametrize("case", FOREIGN_CASES)
def test_a_record_naming_a_process_not_ours_is_refused_and_nothing_signalled(
    case: str, spawn: Spawn, env: dict[str, str], tag: dict[str, str]
) -> None:
    ours = spawn()  # a live stand-in raylet in the same record: it must survive too
    entry, bystander = foreign_entry(case, spawn)
    raw = write_record(env, (ray_process(ours),), (entry,))

    status = run_cli_here("status", "--json", env=env)
    assert status.returncode == 0, status.stderr
    payload = json.loads(status.stdout)
    p1 = next(p for p in payload["partitions"] if p["partition"] == "p1")
    assert p1["alive"] is False, "status never calls it ours"
    assert any(f"process {entry.pid} (raylet)" in w for w in payload["warnings"]), payload["warnings"]

    for args in (["stop"], ["stop", "--grace", "0"], ["start", "--recover"], ["start", "--head", "--partitions", "2"]):
        proc = run_cli_here(*args, env=env)
        assert_clean_error(proc, 2, str(Path(env["RAYACCEL_STATE_DIR"]) / "host.json"), f"process {entry.pid}")
        assert state_bytes(env) == raw, f"{args} changed the record"
        assert ours.poll() is None, f"{args} signalled a process although the record cannot be trusted"
        if bystander is not None:
            assert bystander.poll() is None, f"{args} signalled a process it never started"
    assert set(tagged(tag)) >= {ours.pid}


def test_stop_stops_exactly_the_recorded_processes_and_their_children(
    spawn: Spawn, env: dict[str, str], tag: dict[str, str]
) -> None:
    raylet = spawn(child=True)
    bystander = spawn()
    children = set(tagged(tag)) - {raylet.pid, bystander.pid}
    assert len(children) == 1
    write_record(env, (ray_process(raylet),))
    status = json.loads(run_cli_here("status", "--json", env=env).stdout)
    assert status["partitions"][0]["alive"] is True and status["warnings"] == []

    proc = run_cli_here("stop", "--grace", "2", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads(proc.stdout)["pids"]) == {raylet.pid, *children}
    raylet.wait(timeout=5)
    deadline = time.monotonic() + 5
    while children & set(tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not children & set(tagged(tag)), "the raylet's children are stopped with it"
    assert bystander.poll() is None, "a process the record does not name is untouched"
    assert state_bytes(env) is None


@badinput("dangerous")
def test_a_reused_pid_is_stale_not_ours(spawn: Spawn, env: dict[str, str]) -> None:
    sleeper = spawn()
    reused = ray_process(sleeper, start_ticks=ray_process(sleeper).start_ticks - 5)
    write_record(env, (reused,))
    status = json.loads(run_cli_here("status", "--json", env=env).stdout)
    assert status["partitions"][0]["alive"] is False and status["running"] is False
    proc = run_cli_here("stop", "--json", env=env)
    assert proc.returncode == 0 and json.loads(proc.stdout)["pids"] == []
    assert sleeper.poll() is None
    assert state_bytes(env) is None, "a stale record is cleared"


@badinput("dangerous")
def test_a_record_from_another_host_is_never_acted_on(spawn: Spawn, env: dict[str, str]) -> None:
    raylet = spawn()
    raw = write_record(env, (ray_process(raylet),), host="host-b")
    status = json.loads(run_cli_here("status", "--json", env=env).stdout)
    assert status["partitions"][0]["alive"] is False
    assert any("host-b" in w for w in status["warnings"])
    for args in (["stop"], ["start", "--recover"], ["start", "--head", "--partitions", "2"]):
        assert_clean_error(run_cli_here(*args, env=env), 2, "'host-b'")
        assert state_bytes(env) == raw and raylet.poll() is None


def test_the_default_state_dir_is_per_host(tmp_path: Path, env: dict[str, str]) -> None:
    env = {k: v for k, v in env.items() if k != "RAYACCEL_STATE_DIR"}
    status = json.loads(run_cli_here("status", "--json", env=env).stdout)
    assert status["state_dir"] == str(Path(env["HOME"]) / ".ray-accel" / statedir.host_name())
    assert status["state_file"] is None and not status["warnings"]
    assert not (Path(env["HOME"]) / ".ray-accel").exists(), "status makes nothing"


def test_host_names_become_safe_directory_names(monkeypatch: pytest.MonkeyPatch) -> None:
    for raw, safe in [("node-1.example", "node-1.example"), ("../../etc", "_.._etc"), ("a/b c", "a_b_c"), ("", "")]:
        monkeypatch.setattr("socket.gethostname", lambda raw=raw: raw)
        name = statedir.host_name()
        assert "/" not in name and not name.startswith(".") and name
        if safe:
            assert name == safe


# ------------------------------------------------ top and status start nothing


@badinput("dangerous")
@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_top_once_and_status_without_a_cluster_start_nothing(
    json_flag: list[str], env: dict[str, str], tag: dict[str, str]
) -> None:
    env = {k: v for k, v in env.items() if k != "RAYACCEL_STATE_DIR"}  # the default dir, under HOME
    proc = run_cli_here("top", "--once", *json_flag, env=env)
    assert_clean_error(proc, 1, "no cluster")
    if json_flag:
        assert json.loads(proc.stderr)["exit_code"] == 1
    status = run_cli_here("status", *json_flag, env=env)
    assert status.returncode == 0
    assert list(Path(env["HOME"]).rglob("*")) == [], "nothing is written to HOME"
    assert tagged(tag) == {}, "no Ray process was started"


# ------------------------------------------------ no path from unvalidated names


@badinput("dangerous")
@pytest.mark.parametrize("name", ["../x", "../../escape", "a/b", "$(id)", "p" * 200, "p\u0430rt", ".x", "x."], ids=repr)
def test_manual_names_never_become_paths(name: str, tmp_path: Path, env: dict[str, str], tag: dict[str, str]) -> None:
    outside = tmp_path / "x.result.json"
    outside.write_text("keep")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    proc = run_cli_here("start", "--head", "--mode", "manual", "--manual", f"{name}=0-15", env=env)
    assert_clean_error(proc, 2, repr(name))
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before, "no file created or removed"
    assert outside.read_text() == "keep"
    assert tagged(tag) == {}


# ------------------------------------------------ the state directory's mode


@badinput("dangerous")
def test_a_shared_state_dir_keeps_its_mode(tmp_path: Path, env: dict[str, str]) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    env["RAYACCEL_STATE_DIR"] = str(shared)
    for args in (["status"], ["stop"], ["start", "--recover"], ["top", "--once"]):
        proc = run_cli_here(*args, env=env)
        assert "Traceback" not in proc.stderr
        assert stat.S_IMODE(shared.stat().st_mode) == 0o1777, f"{args} changed the mode"
    assert "writable by other users (mode 1777)" in run_cli_here("stop", env=env).stderr


def test_a_new_state_dir_is_made_0700_with_its_parents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYACCEL_STATE_DIR", str(tmp_path / "a" / "b" / "state"))
    path = statedir.ensure_dir(statedir.place_for("10.0.0.1"))
    for p in (path, path.parent, path.parent.parent):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p
    os.chmod(path, 0o755)
    statedir.ensure_dir(statedir.place_for("10.0.0.1"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o755, "an existing directory is used as it is"
    monkeypatch.delenv("RAYACCEL_STATE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = statedir.ensure_dir(statedir.place_for("10.0.0.1"))
    assert path == tmp_path / "home" / ".ray-accel" / statedir.host_name() / "10.0.0.1"
    for p in (path, path.parent, path.parent.parent):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p


# ------------------------------------------------ bad start input never reaches the launcher

BAD_START = [
    (["--head", "--address", "garbage"], "'garbage'"),
    (["--address", "garbage"], "'garbage'"),
    (["--address", "host:99999"], "99999"),
    (["--address", "host:"], "'host:'"),
    (["--address", "127.0.0.1:٦٣٧٩"], "٦٣٧٩"),
    (["--address", "a b:6379"], "'a b'"),
    (["--head", "--port", "0"], "'0'"),
    (["--head", "--port", "80"], "'80'"),
    (["--head", "--port", "65536"], "'65536'"),
    (["--head", "--port", "٦٣٧٩"], "'٦٣٧٩'"),
    (["--head", "--port", "6379.0"], "'6379.0'"),
    (["--head", "--partitions", "٤"], "'٤'"),
    (["--head", "--partitions", "0"], "'0'"),
    (["--head", "--partitions", "-2"], "'-2'"),
    (["--head", "--timeout", "-1"], "'-1'"),
    (["--head", "--timeout", "0"], "'0'"),
    (["--head", "--timeout", "nan"], "'nan'"),
    (["--head", "--timeout", "inf"], "'inf'"),
    (["--head", "--timeout", "1e9"], "'1e9'"),
    (["--head", "--timeout", "\u0661\u0660"], "'\u0661\u0660'"),
    (["--head", "--port-base", "0"], "'0'"),
    (["--head", "--max-workers", "5"], "'5'"),
    (["--head", "--max-workers", "lots"], "'lots'"),
    (["--address", "127.0.0.1:6379", "--port", "7000"], "--port is the new head's GCS port"),
    (["--head", "--address", "127.0.0.1:6379"], "exactly one of"),
    (["--recover", "--partitions", "2"], "--partitions"),
    (["--recover", "--block"], "--block"),
    (["--head", "--", "--block"], "ray-accel start --block"),
    (["--head", "--", "--port", "7000"], "--port is set per partition"),
    (["--head", "--", "--node-manager-port=5"], "--node-manager-port"),
    (["--head", "--mode", "sideways"], "'sideways'"),
    (["--head", "--partitions", "3"], "3"),
]


# With --json the same refusals are one JSON object on stderr (every other case, to keep the run short).
BAD_START_CASES = [(args, needle, False) for args, needle in BAD_START] + [
    (args, needle, True) for args, needle in BAD_START[::2]
]


@badinput("launcher")
@pytest.mark.parametrize(
    ("args", "needle", "as_json"),
    BAD_START_CASES,
    ids=[" ".join(a) + (" --json" if j else "") for a, _, j in BAD_START_CASES],
)
def test_bad_start_input_starts_nothing_and_writes_nothing(
    args: list[str], needle: str, as_json: bool, tmp_path: Path, env: dict[str, str], tag: dict[str, str]
) -> None:
    cut = args.index("--") if "--" in args else len(args)
    argv = ["start", *args[:cut], *(["--json"] if as_json else []), *args[cut:]]
    proc = run_cli_here(*argv, env=env)
    assert_clean_error(proc, 2)
    if as_json:
        error = json.loads(proc.stderr.strip().splitlines()[-1])
        assert error["exit_code"] == 2 and needle in error["error"], error
    else:
        assert needle in proc.stderr, proc.stderr
    assert not Path(env["RAYACCEL_STATE_DIR"]).exists(), "refused before the state directory is touched"
    assert list(Path(env["HOME"]).rglob("*")) == [], "no token made"
    assert tagged(tag) == {}, "no raylet, GCS or launcher started"


@badinput("exit-code")
@pytest.mark.parametrize("grace", ["-1", "nan", "inf", "-inf", "abc", "1e9", "\u0665"])
def test_stop_with_a_bad_grace_signals_nothing_and_keeps_the_record(
    grace: str, spawn: Spawn, env: dict[str, str]
) -> None:
    raylet = spawn()
    raw = write_record(env, (ray_process(raylet),))
    assert_clean_error(run_cli_here("stop", "--grace", grace, env=env), 2, repr(grace))
    assert state_bytes(env) == raw and raylet.poll() is None


@badinput("state")
def test_a_rejected_start_keeps_a_stale_record(spawn: Spawn, env: dict[str, str]) -> None:
    sleeper = spawn()
    raw = write_record(env, (ray_process(sleeper, start_ticks=1),))  # stale: that process is gone
    assert_clean_error(run_cli_here("start", "--head", "--partitions", "3", env=env), 2, "3")
    assert state_bytes(env) == raw, "the stale record is only removed by a start that goes ahead"


# ------------------------------------------------ a record that does not fit: every command


def _corrupt(env: dict[str, str], text: bytes) -> bytes:
    directory = Path(env["RAYACCEL_STATE_DIR"])
    directory.mkdir(mode=0o700, exist_ok=True)
    (directory / "host.json").write_bytes(text)
    return text


def _valid(env: dict[str, str], spawn: Spawn) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(write_record(env, (ray_process(spawn()),)))
    return data


CORRUPT: dict[str, Callable[[dict[str, Any]], object]] = {
    "list": lambda d: [],
    "object": lambda d: {},
    "no-partitions-key": lambda d: {k: v for k, v in d.items() if k != "partitions"},
    "empty-partition-list": lambda d: {**d, "partitions": []},
    "empty-partition": lambda d: {**d, "partitions": [{}]},
    "pid-string": lambda d: json.loads(
        json.dumps(d).replace('"pid": ', '"pid": "').replace(', "start_ticks"', '", "start_ticks"')
    ),
    "pid-negative": lambda d: json.loads(json.dumps(d).replace('"pid": ', '"pid": -')),
    "pid-pair": lambda d: {**d, "partitions": [{**d["partitions"][0], "processes": [[4242, 10]]}]},
    "nested": lambda d: None,
    "nan": lambda d: None,
    "version-2": lambda d: {**d, "version": 2},
    "name-traversal": lambda d: {**d, "partitions": [{**d["partitions"][0], "partition": "../x"}]},
}


def _corrupt_bytes(case: str, data: dict[str, Any]) -> bytes:
    if case == "nested":
        return b"[" * 100_000 + b"]" * 100_000
    if case == "nan":
        return json.dumps(data).replace('"created": 1.0', '"created": NaN').encode()
    return json.dumps(CORRUPT[case](data)).encode()


@badinput("traceback")
@pytest.mark.parametrize("case", list(CORRUPT))
def test_a_record_that_does_not_fit_is_exit_2_naming_the_file_for_every_command(
    case: str, spawn: Spawn, env: dict[str, str], tag: dict[str, str]
) -> None:
    data = _valid(env, spawn)
    (raylet,) = tagged(tag)
    raw = _corrupt(env, _corrupt_bytes(case, data))
    path = str(Path(env["RAYACCEL_STATE_DIR"]) / "host.json")
    for args in (
        ["status"],
        ["status", "--json"],
        ["stop"],
        ["start", "--recover"],
        ["start", "--head"],
        ["top", "--once"],
    ):
        proc = run_cli_here(*args, env=env)
        assert_clean_error(proc, 2, path)
        assert state_bytes(env) == raw, f"{args} changed the record"
    assert set(tagged(tag)) == {raylet}, "nothing signalled, nothing started"


# ------------------------------------------------ hangs: FIFOs where files should be


@badinput("dangerous")
def test_a_fifo_as_the_state_file_is_an_error_not_a_hang(env: dict[str, str]) -> None:
    directory = Path(env["RAYACCEL_STATE_DIR"])
    directory.mkdir(mode=0o700)
    os.mkfifo(directory / "host.json")
    for args in (["status"], ["stop"], ["start", "--recover"], ["start", "--head"]):
        # A hang (opening a FIFO blocks until a writer comes) ends in the timeout's error, not
        # in a timed assertion: a loaded CI machine took 11 s to answer and was no hang.
        proc = run_cli(*args, env=env, timeout=120)
        assert_clean_error(proc, 2, "host.json", "is a FIFO, not a regular file")


@badinput("dangerous")
def test_a_fifo_as_the_lock_file_is_an_error_not_a_hang(spawn: Spawn, env: dict[str, str]) -> None:
    raylet = spawn()
    raw = write_record(env, (ray_process(raylet),))  # `stop` takes the lock where there is a record
    os.mkfifo(Path(env["RAYACCEL_STATE_DIR"]) / "lock")
    for args in (["stop"], ["start", "--head", "--partitions", "2"]):
        assert_clean_error(run_cli(*args, env=env, timeout=20), 2, "lock")
        assert state_bytes(env) == raw and raylet.poll() is None


@badinput("dangerous")
def test_a_fifo_as_the_token_file_is_an_error_not_a_hang(
    tmp_path: Path, env: dict[str, str], tag: dict[str, str]
) -> None:
    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    env["RAY_AUTH_TOKEN_PATH"] = str(fifo)
    proc = run_cli("start", "--head", "--partitions", "2", env=env, timeout=30)
    assert_clean_error(proc, 2, str(fifo))
    assert tagged(tag) == {}
    assert state_bytes(env) is None


# ------------------------------------------------ the host lock


@badinput("state")
def test_the_lock_refuses_a_second_command_naming_the_lock(
    spawn: Spawn, env: dict[str, str], tag: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    raylet = spawn()
    raw = write_record(env, (ray_process(raylet),))
    monkeypatch.setenv("RAYACCEL_STATE_DIR", env["RAYACCEL_STATE_DIR"])
    lock = str(Path(env["RAYACCEL_STATE_DIR"]) / "lock")
    with statedir.host_lock("start", statedir.place_for(LOOPBACK)):
        for args in (["stop"], ["start", "--recover"], ["start", "--head", "--partitions", "2"]):
            proc = run_cli_here(*args, env=env)
            assert_clean_error(proc, 2, lock, f"start, pid {os.getpid()}")
            assert state_bytes(env) == raw and raylet.poll() is None
    assert set(tagged(tag)) == {raylet.pid}, "nothing was started"
    assert run_cli_here("stop", env=env).returncode == 0, "the lock is released on exit"
    raylet.wait(timeout=10)


# ------------------------------------------------ a host is its name AND its node IP

ELSEWHERE = "192.0.2.123"  # TEST-NET-1 (RFC 5737): an address of no test host


def default_env(env: dict[str, str]) -> dict[str, str]:
    """No RAYACCEL_STATE_DIR: records live in ~/.ray-accel/<host name>/<node IP>/."""
    return {k: v for k, v in env.items() if k != "RAYACCEL_STATE_DIR"}


def home_record(env: dict[str, str], ip: str) -> Path:
    return Path(env["HOME"]) / ".ray-accel" / statedir.host_name() / ip_text(ip) / "host.json"


@badinput("dangerous")
def test_a_record_of_this_name_for_another_address_is_never_acted_on(spawn: Spawn, env: dict[str, str]) -> None:
    """Another host of the same name sharing this home (NFS), or this host before
    its address changed: nothing here acts on it, and every command names it."""
    env = default_env(env)
    raylet = spawn()
    theirs = home_record(env, ELSEWHERE)
    raw = write_record(env, (ray_process(raylet),), ip=ELSEWHERE, path=theirs)
    status = json.loads(run_cli("status", "--json", env=env).stdout)
    assert status["running"] is False and status["state_file"] is None and status["partitions"] == []
    assert any(str(theirs) in w and "RAYACCEL_STATE_DIR" in w for w in status["warnings"]), status["warnings"]
    stop = run_cli("stop", "--json", env=env)
    assert stop.returncode == 0 and json.loads(stop.stdout)["pids"] == [], stop.stderr
    assert str(theirs) in stop.stderr
    assert_clean_error(run_cli("start", "--recover", env=env), 2, "nothing to recover", str(theirs))
    assert theirs.read_bytes() == raw and raylet.poll() is None
    # RAYACCEL_STATE_DIR naming its directory is the way to act on it (this host, moved)
    named = {**env, "RAYACCEL_STATE_DIR": str(theirs.parent)}
    status = json.loads(run_cli("status", "--json", env=named).stdout)
    assert status["partitions"][0]["alive"] is True and status["host_ip"] == ELSEWHERE
    assert any("not an address of this host" in w for w in status["warnings"]), status["warnings"]
    assert_clean_error(run_cli("start", "--recover", env=named), 2, ELSEWHERE, "not an address of this host")
    assert theirs.read_bytes() == raw and raylet.poll() is None
    stop = run_cli("stop", "--json", env=named)
    assert stop.returncode == 0 and json.loads(stop.stdout)["pids"] == [raylet.pid], stop.stderr
    assert "not an address of this host" in stop.stderr and not theirs.exists()


def test_this_hosts_record_is_the_one_of_its_address_beside_another_hosts(spawn: Spawn, env: dict[str, str]) -> None:
    env = default_env(env)
    mine, theirs = spawn(), spawn()
    write_record(env, (ray_process(mine),), path=home_record(env, LOOPBACK))
    other = write_record(env, (ray_process(theirs),), ip=ELSEWHERE, path=home_record(env, ELSEWHERE))
    status = json.loads(run_cli("status", "--json", env=env).stdout)
    assert status["state_file"] == str(home_record(env, LOOPBACK)) and status["host_ip"] == LOOPBACK
    assert status["running"] and not status["warnings"], status["warnings"]
    stop = run_cli("stop", "--json", env=env)
    assert stop.returncode == 0 and json.loads(stop.stdout)["pids"] == [mine.pid], stop.stderr
    assert not home_record(env, LOOPBACK).exists() and home_record(env, ELSEWHERE).read_bytes() == other
    assert theirs.poll() is None


@badinput("dangerous")
def test_a_record_copied_into_another_addresss_directory_is_refused(spawn: Spawn, env: dict[str, str]) -> None:
    env = default_env(env)
    raylet = spawn()
    path = home_record(env, LOOPBACK)
    raw = write_record(env, (ray_process(raylet),), ip=ELSEWHERE, path=path)
    for args in (["status"], ["stop"], ["start", "--recover"]):
        assert_clean_error(run_cli(*args, env=env), 2, str(path), ELSEWHERE)
        assert path.read_bytes() == raw and raylet.poll() is None


@badinput("dangerous")
def test_records_for_two_of_this_hosts_addresses_are_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spawn: Spawn, env: dict[str, str]
) -> None:
    monkeypatch.delenv("RAYACCEL_STATE_DIR", raising=False)
    monkeypatch.setenv("HOME", env["HOME"])
    raylet = spawn()
    for ip in (LOOPBACK, "10.1.1.1"):
        write_record(env, (ray_process(raylet),), ip=ip, path=home_record(env, ip))
    monkeypatch.setattr(statedir, "local_addresses", lambda: frozenset({LOOPBACK, "10.1.1.1"}))
    with pytest.raises(statedir.StateError, match="several of its addresses") as e:
        statedir.locate()
    assert str(home_record(env, LOOPBACK)) in str(e.value) and str(home_record(env, "10.1.1.1")) in str(e.value)
    monkeypatch.setattr(statedir, "local_addresses", lambda: frozenset({LOOPBACK}))
    found = statedir.locate()
    assert found.place is not None and found.place.file == home_record(env, LOOPBACK)
    assert found.elsewhere == (home_record(env, "10.1.1.1"),)


@pytest.mark.parametrize("layout", ["state-dir", "home"])
def test_an_earlier_versions_node_json_is_read_with_a_warning_and_stopped(
    layout: str, spawn: Spawn, env: dict[str, str]
) -> None:
    """`node.json` (no node IP): status shows it, start refuses while it runs,
    --recover refuses it, stop stops what it names and removes it."""
    if layout == "home":
        env = default_env(env)
        path = Path(env["HOME"]) / ".ray-accel" / statedir.host_name() / "node.json"
    else:
        path = Path(env["RAYACCEL_STATE_DIR"]) / "node.json"
    raylet = spawn()
    raw = write_record(env, (ray_process(raylet),), ip=None, path=path)
    assert json.loads(raw)["version"] == 3 and "host_ip" not in json.loads(raw)
    status = json.loads(run_cli("status", "--json", env=env).stdout)
    assert status["state_file"] == str(path) and status["running"] and status["host_ip"] is None
    assert any("earlier ray-accel" in w for w in status["warnings"]), status["warnings"]
    assert_clean_error(run_cli("start", "--head", "--partitions", "2", env=env), 2, "already running", str(path))
    assert_clean_error(run_cli("start", "--recover", env=env), 2, str(path), "earlier ray-accel")
    assert path.read_bytes() == raw and raylet.poll() is None
    stop = run_cli("stop", "--json", env=env)
    assert stop.returncode == 0 and json.loads(stop.stdout)["pids"] == [raylet.pid], stop.stderr
    assert "earlier ray-accel" in stop.stderr and not path.exists()


def test_start_clears_this_hosts_stale_records_of_other_addresses_and_versions(
    monkeypatch: pytest.MonkeyPatch, spawn: Spawn, env: dict[str, str]
) -> None:
    """What `start` checks under its lock before launching anything: every
    record of this host, wherever its address put it."""
    from ray_accel.cluster.start import refuse_running

    monkeypatch.delenv("RAYACCEL_STATE_DIR", raising=False)
    monkeypatch.setenv("HOME", env["HOME"])
    sleeper = spawn()
    gone = ray_process(sleeper, start_ticks=1)  # stale: that process is gone
    legacy = Path(env["HOME"]) / ".ray-accel" / statedir.host_name() / "node.json"
    write_record(env, (gone,), ip=None, path=legacy)
    write_record(env, (gone,), ip=LOOPBACK, path=home_record(env, LOOPBACK))
    theirs = write_record(env, (ray_process(sleeper),), ip=ELSEWHERE, path=home_record(env, ELSEWHERE))
    stale = refuse_running("start", statedir.place_for("10.9.9.9"))
    assert sorted(p.file for p in stale) == sorted([legacy, home_record(env, LOOPBACK)])
    write_record(env, (ray_process(sleeper),), ip=LOOPBACK, path=home_record(env, LOOPBACK))
    with pytest.raises(InputError, match="already running on this host") as e:
        refuse_running("start", statedir.place_for("10.9.9.9"))
    assert str(home_record(env, LOOPBACK)) in str(e.value)
    assert home_record(env, ELSEWHERE).read_bytes() == theirs, "another host's record is never looked at"
