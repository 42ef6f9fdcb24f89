"""Bad input at the command line, each with and without `--json`: exit 2 with one error naming the value (with `--json`
a JSON object on stderr with the same exit code), no Traceback, nothing
started, nothing written: no state directory, nothing in HOME, no process
carrying the test's tag (so no raylet or GCS), and a record already there
byte-for-byte unchanged. Runs the installed console script on the mock
trn1.32xlarge with a private state directory and HOME; never starts Ray.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ray_accel.cluster import statedir
from ray_accel.cluster.auth import Auth
from ray_accel.cluster.host import port_blocks
from ray_accel.cluster.procs import identity
from ray_accel.cluster.record import HostRecord, PartitionEntry, RayProcess, dumps
from tests.badinput import badinput
from tests.bridge_specs import NEURON
from tests.cli_process import run_cli
from tests.clirun import run_cli_here
from tests.tagged import new_tag, tagged

SPEC = NEURON  # the Trainium host of tests/bridge_specs.py

# (id, argv, extra environment, exit code, what the error names, class, setup)
# setup: "" nothing; "stale" a record naming a process that is gone; "shared" a 1777 state dir.
CASES: list[tuple[str, list[str], dict[str, str], int, str, str, str]] = [
    # A mistyped flag of ours is an error, never passed on to `ray start`.
    ("start --agnets", ["start", "--head", "--agnets", "2"], {}, 2, "--agnets", "launcher", ""),
    ("start --prot", ["start", "--head", "--prot", "7000"], {}, 2, "--prot", "launcher", ""),
    ("start --address garbage", ["start", "--address", "garbage"], {}, 2, "'garbage'", "launcher", ""),
    ("start --address host:99999", ["start", "--address", "host:99999"], {}, 2, "99999", "launcher", ""),
    ("start --address :6379", ["start", "--address", ":6379"], {}, 2, "':6379'", "launcher", ""),
    ("start --port 0", ["start", "--head", "--port", "0"], {}, 2, "'0'", "launcher", ""),
    ("start --port -1", ["start", "--head", "--port", "-1"], {}, 2, "'-1'", "launcher", ""),
    ("start --port abc", ["start", "--head", "--port", "abc"], {}, 2, "'abc'", "launcher", ""),
    ("start --port arabic", ["start", "--head", "--port", "٦٣٧٩"], {}, 2, "'٦٣٧٩'", "launcher", ""),
    ("start --port-base 99999", ["start", "--head", "--port-base", "99999"], {}, 2, "'99999'", "launcher", ""),
    ("start --timeout -1", ["start", "--head", "--timeout", "-1"], {}, 2, "'-1'", "launcher", ""),
    ("start --timeout 0", ["start", "--head", "--timeout", "0"], {}, 2, "'0'", "launcher", ""),
    ("start --timeout nan", ["start", "--head", "--timeout", "nan"], {}, 2, "'nan'", "launcher", ""),
    ("start --timeout -inf", ["start", "--head", "--timeout", "-inf"], {}, 2, "'-inf'", "launcher", ""),
    ("start --partitions arabic", ["start", "--head", "--partitions", "٤"], {}, 2, "'٤'", "launcher", ""),
    ("start --partitions 2.5", ["start", "--head", "--partitions", "2.5"], {}, 2, "'2.5'", "launcher", ""),
    ("start --partitions 3", ["start", "--head", "--partitions", "3"], {}, 2, "3 partitions", "launcher", ""),
    ("start manual without spec", ["start", "--head", "--mode", "manual"], {}, 2, "manual mode", "launcher", ""),
    (
        "start manual twice",
        ["start", "--head", "--mode", "manual", "--manual", "a=0-3;a=4-7"],
        {},
        2,
        "'a'",
        "launcher",
        "",
    ),
    ("start --resources -1", ["start", "--head", "--resources", '{"x": -1}'], {}, 2, "'x' is -1", "launcher", ""),
    ("start --resources not json", ["start", "--head", "--resources", "nope"], {}, 2, "'nope'", "launcher", ""),
    ("start --labels =", ["start", "--head", "--labels", "="], {}, 2, "bad label key ''", "launcher", ""),
    (
        "start bad mask",
        ["start", "--head"],
        {"NEURON_RT_VISIBLE_CORES": "0-x"},
        2,
        "NEURON_RT_VISIBLE_CORES='0-x'",
        "masks",
        "",
    ),
    # Exit codes: usage and input errors are 2, whatever the command.
    ("plan --partitions 3", ["plan", "--partitions", "3"], {}, 2, "into 3 partitions", "exit-code", ""),
    ("plan --partitions arabic", ["plan", "--partitions", "٤"], {}, 2, "is not an integer", "exit-code", ""),
    ("plan --partitions 1e3", ["plan", "--partitions", "1e3"], {}, 2, "'1e3'", "exit-code", ""),
    ("plan --partitions -1", ["plan", "--partitions", "-1"], {}, 2, "'-1'", "exit-code", ""),
    ("plan --mode sideways", ["plan", "--mode", "sideways"], {}, 2, "'sideways'", "exit-code", ""),
    ("plan --mode empty", ["plan", "--mode", ""], {}, 2, "empty mode ''", "exit-code", ""),
    ("plan --mode blank", ["plan", "--mode", " "], {}, 2, "empty mode ' '", "exit-code", ""),
    ("start --mode empty", ["start", "--head", "--mode", ""], {}, 2, "empty mode ''", "launcher", ""),
    ("repartition --mode empty", ["repartition", "--mode", ""], {}, 2, "empty mode ''", "exit-code", ""),
    (
        "plan --manual with another mode",
        ["plan", "--mode", "auto-split", "--manual", "a=0-3"],
        {},
        2,
        "a manual spec was given with mode auto-split",
        "exit-code",
        "",
    ),
    ("plan ray options", ["plan", "--", "--num-cpus", "2"], {}, 2, "--num-cpus", "exit-code", ""),
    ("devices --bogus", ["devices", "--bogus"], {}, 2, "--bogus", "exit-code", ""),
    ("no such command", ["frobnicate"], {}, 2, "'frobnicate'", "exit-code", ""),
    ("top --interval -1", ["top", "--interval", "-1"], {}, 2, "'-1'", "exit-code", ""),
    ("top --interval 0", ["top", "--interval", "0"], {}, 2, "'0'", "exit-code", ""),
    ("top --interval nan", ["top", "--interval", "nan"], {}, 2, "'nan'", "exit-code", ""),
    ("top --interval inf", ["top", "--interval", "inf"], {}, 2, "'inf'", "exit-code", ""),
    ("unknown preset", ["plan"], {"RAYACCEL_MOCK": "trn9.large"}, 2, "'trn9.large'", "exit-code", ""),
    # Values named and bounded.
    ("plan --partitions 1e8", ["plan", "--partitions", "100000000"], {}, 2, "'100000000'", "unnamed", ""),
    (
        "plan manual huge range",
        ["plan", "--mode", "manual", "--manual", "a=0-99999999"],
        {},
        2,
        "'0-99999999'",
        "unnamed",
        "",
    ),
    ("plan manual 40", ["plan", "--mode", "manual", "--manual", "a=40"], {}, 2, "40", "unnamed", ""),
    # Masks read by every command that plans or lists, and named when bad.
    (
        "devices mask letters",
        ["devices"],
        {"NEURON_RT_VISIBLE_CORES": "a"},
        2,
        "NEURON_RT_VISIBLE_CORES='a'",
        "masks",
        "",
    ),
    (
        "devices mask arabic",
        ["devices"],
        {"NEURON_RT_VISIBLE_CORES": "\u0660-\u0663"},
        2,
        "NEURON_RT_VISIBLE_CORES=",
        "masks",
        "",
    ),
    ("devices mask past the host", ["devices"], {"NEURON_RT_VISIBLE_CORES": "0-99"}, 2, "'0-99'", "masks", ""),
    ("devices mask huge", ["devices"], {"NEURON_RT_VISIBLE_CORES": "0-99999999"}, 2, "'0-99999999'", "masks", ""),
    ("plan mask -1", ["plan"], {"NEURON_RT_VISIBLE_CORES": "-1"}, 2, "NEURON_RT_VISIBLE_CORES='-1'", "masks", ""),
    (
        "plan cuda mask 8",
        ["plan"],
        {"RAYACCEL_MOCK": "p4d.24xlarge", "CUDA_VISIBLE_DEVICES": "8"},
        2,
        "CUDA_VISIBLE_DEVICES='8'",
        "masks",
        "",
    ),
    (
        "plan cuda mask twice",
        ["plan"],
        {"RAYACCEL_MOCK": "p4d.24xlarge", "CUDA_VISIBLE_DEVICES": "0,0"},
        2,
        "duplicate GPU 0",
        "masks",
        "",
    ),
    (
        "devices cuda uuid",
        ["devices"],
        {"RAYACCEL_MOCK": "p4d.24xlarge", "CUDA_VISIBLE_DEVICES": "GPU-zzz"},
        2,
        "'GPU-zzz'",
        "masks",
        "",
    ),
    # Names that could be paths: nothing outside the state directory is touched.
    ("manual ../x", ["start", "--head", "--mode", "manual", "--manual", "../x=0-15"], {}, 2, "'../x'", "dangerous", ""),
    (
        "manual /abs",
        ["start", "--head", "--mode", "manual", "--manual", "/tmp/x=0-15"],
        {},
        2,
        "'/tmp/x'",
        "dangerous",
        "",
    ),
    ("manual ..", ["start", "--head", "--mode", "manual", "--manual", "..=0-15"], {}, 2, "'..'", "dangerous", ""),
    ("manual empty name", ["start", "--head", "--mode", "manual", "--manual", "=0-15"], {}, 2, "''", "dangerous", ""),
    # A rejected command leaves a stale record where it was (it is only removed by a start that goes ahead).
    ("stale: --partitions 3", ["start", "--head", "--partitions", "3"], {}, 2, "3 partitions", "state", "stale"),
    ("stale: --agnets", ["start", "--head", "--agnets", "2"], {}, 2, "--agnets", "state", "stale"),
    ("stale: --port 0", ["start", "--head", "--port", "0"], {}, 2, "'0'", "state", "stale"),
    ("stale: --timeout nan", ["start", "--head", "--timeout", "nan"], {}, 2, "'nan'", "state", "stale"),
    ("stale: --address garbage", ["start", "--address", "garbage"], {}, 2, "'garbage'", "state", "stale"),
    ("stale: --mode empty", ["start", "--head", "--mode", ""], {}, 2, "empty mode ''", "state", "stale"),
    ("stale: repartition --mode empty", ["repartition", "--mode", ""], {}, 2, "empty mode ''", "state", "stale"),
    (
        "stale: manual ../x",
        ["start", "--head", "--mode", "manual", "--manual", "../x=0-15"],
        {},
        2,
        "'../x'",
        "state",
        "stale",
    ),
    (
        "stale: bad mask",
        ["start", "--head"],
        {"NEURON_RT_VISIBLE_CORES": "x"},
        2,
        "NEURON_RT_VISIBLE_CORES",
        "state",
        "stale",
    ),
    ("stale: stop --grace -1", ["stop", "--grace", "-1"], {}, 2, "'-1'", "state", "stale"),
    ("stale: stop --grace nan", ["stop", "--grace", "nan"], {}, 2, "'nan'", "state", "stale"),
    ("stale: stop --grace inf", ["stop", "--grace", "inf"], {}, 2, "'inf'", "state", "stale"),
    ("stale: stop ray options", ["stop", "--", "--force"], {}, 2, "--force", "state", "stale"),
    (
        "stale: recover --partitions",
        ["start", "--recover", "--partitions", "2"],
        {},
        2,
        "--partitions",
        "state",
        "stale",
    ),
    # A shared (1777) state directory keeps its mode through a refusal.
    (
        "shared: start --partitions 3",
        ["start", "--head", "--partitions", "3"],
        {},
        2,
        "3 partitions",
        "dangerous",
        "shared",
    ),
    ("shared: stop --grace -1", ["stop", "--grace", "-1"], {}, 2, "'-1'", "dangerous", "shared"),
    ("shared: top --interval -1", ["top", "--interval", "-1"], {}, 2, "'-1'", "dangerous", "shared"),
]

PARAMS = [
    pytest.param(case, as_json, id=case[0] + (" --json" if as_json else ""), marks=badinput(case[5]))
    for case in CASES
    for as_json in (False, True)
]
# Every case runs through the CLI's entry function in this process
# (`tests.clirun`); these also run the installed console script, so the
# script itself (its exit status, its streams) stays covered, one per class.
AS_SUBPROCESS = {
    "start --agnets",
    "start bad mask",
    "plan --partitions 3",
    "plan --partitions 1e8",
    "stale: stop --grace -1",
    "shared: top --interval -1",
}


def test_the_subprocess_cases_are_cases_one_per_class() -> None:
    ids = {case[0]: case[5] for case in CASES}
    assert AS_SUBPROCESS <= set(ids), AS_SUBPROCESS - set(ids)
    assert {ids[i] for i in AS_SUBPROCESS} == set(ids.values()), "every class keeps a console-script case"


@pytest.fixture
def tag() -> dict[str, str]:
    return new_tag()


@pytest.fixture
def bystander(tag: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """A live process of the test's own: a stale record names its PID with
    another start time, so nothing may signal it."""
    p = subprocess.Popen(["sleep", "600"], env={**os.environ, **tag})
    # Until it has exec'd, /proc shows the parent's environment (no tag): an
    # in-process case can end before that on a busy machine.
    deadline = time.monotonic() + 30
    while p.pid not in tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert p.pid in tagged(tag), "the bystander never started"
    yield p
    p.kill()
    p.wait()


def _stale_record(directory: Path, pid: int) -> bytes:
    argv = (Path(f"/proc/{pid}/cmdline").read_bytes()).split(b"\0")[:-1]
    proc = RayProcess(kind="raylet", pid=pid, start_ticks=1, identity=identity([a.decode() for a in argv]))
    entry = PartitionEntry(
        name="p0",
        device_ids=("neuron:0",),
        core_ids=(0, 1),
        head=False,
        ports=port_blocks(41000, [184])[0],
        processes=(proc,),
    )
    record = HostRecord(
        host=statedir.host_name(),
        host_ip="127.0.0.1",
        created=1.0,
        head=False,
        mode="auto-split",
        spec=SPEC,
        ray_args=(),
        gcs_address="127.0.0.1:1",
        gcs_port=None,
        auth=Auth("disabled", None, "test"),
        partitions=(entry,),
    )
    raw = dumps(record).encode()
    (directory / "host.json").write_bytes(raw)
    return raw


def _tree(root: Path) -> list[tuple[str, int]]:
    return sorted((str(p), p.lstat().st_mode) for p in root.rglob("*"))


@pytest.mark.parametrize(("case", "as_json"), PARAMS)
def test_bad_input_is_exit_2_naming_it_and_changes_nothing(
    case: tuple[str, list[str], dict[str, str], int, str, str, str],
    as_json: bool,
    tmp_path: Path,
    tag: dict[str, str],
    bystander: subprocess.Popen[bytes],
) -> None:
    _, argv, extra, code, needle, _, setup = case
    home = tmp_path / "home"
    home.mkdir()
    directory = tmp_path / "state"
    env = {
        "RAYACCEL_MOCK": "trn1.32xlarge",
        "RAYACCEL_STATE_DIR": str(directory),
        "HOME": str(home),
        "RAY_AUTH_MODE": "",
        "RAY_AUTH_TOKEN": "",
        "RAY_AUTH_TOKEN_PATH": "",
        **tag,
        **extra,
    }
    raw = None
    if setup:
        directory.mkdir()
        os.chmod(directory, 0o1777 if setup == "shared" else 0o700)
        if setup == "stale":
            raw = _stale_record(directory, bystander.pid)
    outside = tmp_path / "x.log"
    outside.write_text("keep")
    before = _tree(tmp_path)
    cut = argv.index("--") if "--" in argv else len(argv)
    full = [*argv[:cut], *(["--json"] if as_json else []), *argv[cut:]]

    if case[0] in AS_SUBPROCESS:
        proc = run_cli(*full, env=env, timeout=60)
    else:
        proc = run_cli_here(*full, env=env)

    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == "", "a refused command prints no result"
    assert "Traceback" not in proc.stderr, proc.stderr
    if as_json:
        error = json.loads(proc.stderr.strip().splitlines()[-1])
        assert error["exit_code"] == code and needle in error["error"], error
    else:
        assert needle in proc.stderr, proc.stderr
    assert _tree(tmp_path) == before, "no file created, removed or re-moded"
    assert outside.read_text() == "keep"
    if raw is not None:
        assert (directory / "host.json").read_bytes() == raw, "the record is unchanged"
    if setup == "shared":
        assert stat.S_IMODE(directory.stat().st_mode) == 0o1777
    assert set(tagged(tag)) == {bystander.pid}, "nothing started (no raylet, GCS or launcher), nothing signalled"
    assert bystander.poll() is None
