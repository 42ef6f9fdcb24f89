from __future__ import annotations

import json
from pathlib import Path

import pytest

from ray_accel.cli import main
from tests.badinput import badinput
from tests.cli_process import CliRunner, run_cli
from tests.clirun import cli_json_here as cli_json
from tests.clirun import run_cli_here
from tests.fakes.neuron_env import tree_only
from tests.fakes.neuron_sysfs import build_tree

TRN1 = {"RAYACCEL_MOCK": "trn1.32xlarge"}


@pytest.mark.parametrize("count", [2, 4, 8, 16])
def test_auto_split_trn1(count: int) -> None:
    out = cli_json("plan", "--mode", "auto-split", "--partitions", str(count), env=TRN1)
    size = 32 // count
    parts = out["partitions"]
    assert len(parts) == count
    for i, p in enumerate(parts):
        assert p["core_ids"] == list(range(i * size, (i + 1) * size)), "contiguous and aligned"
        assert p["visible_ids"] == ",".join(map(str, p["core_ids"]))
        assert len(p["device_ids"]) == size // 2
        assert p["connected"] is True and p["contiguous"] is True and p["aligned"] is True
    assert out["unassigned"] == []
    assert out["warnings"] == []


def test_devices_of_a_4_way_partition_are_linked() -> None:
    devices = {d["id"]: d for d in cli_json("devices", env=TRN1)["devices"]}
    for p in cli_json("plan", "--partitions", "4", env=TRN1)["partitions"]:
        members = set(p["device_ids"])
        for did in members:
            assert members & set(devices[did]["peers"]), f"{did} has no neighbour in its partition"


@badinput("exit-code")
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--mode", "manual", "--manual", "a=0-3;b=2-5"], "neuron:2"),
        (["--mode", "manual", "--manual", "a=0-3;b=40"], "40"),
        (["--partitions", "0"], "'0' is below the minimum 1"),
        (["--partitions", "32"], "more partitions (32)"),
        (["--mode", "shared"], "SHARED mode is impossible on neuron"),
        (["--partitions", "5"], "into 5 partitions"),
        (["--partitions", "two"], "'two'"),
    ],
)
def test_bad_plans_exit_2_naming_the_value(args: list[str], needle: str, cli: CliRunner) -> None:
    proc = cli("plan", *args, env=TRN1)
    assert proc.returncode == 2, proc.stdout
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr


def test_shared_on_gpus(cli: CliRunner) -> None:
    out = cli_json("plan", "--mode", "shared", "--partitions", "2", env={"RAYACCEL_MOCK": "p5.48xlarge"})
    assert [len(p["device_ids"]) for p in out["partitions"]] == [8, 8]
    assert any("no memory isolation" in w for w in out["warnings"])


def test_plan_without_hardware_is_a_runtime_error(cli: CliRunner) -> None:
    proc = cli("plan", "--partitions", "2", "--backend", "mock")  # RAYACCEL_MOCK unset: mock is inactive
    assert proc.returncode == 1
    assert "no active accelerator backend" in proc.stderr


def test_plan_text_output(cli: CliRunner) -> None:
    proc = cli("plan", "--partitions", "2", env=TRN1)
    assert proc.returncode == 0
    assert "connected=yes contiguous=yes aligned=yes" in proc.stdout
    assert "neuron:0-7" in proc.stdout


def test_an_unforeseen_failure_under_json_is_a_json_object_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ray_accel import cli as cli_main
    from ray_accel.cli import host

    def broken(*args: object, **kwargs: object) -> object:
        raise OSError(5, "Input/output error", "/sys/devices/virtual/neuron_device")

    monkeypatch.setattr(host, "discover", broken)
    assert cli_main.main(["plan", "--partitions", "2", "--json"]) == 1
    err = json.loads(capsys.readouterr().err)
    assert err == {
        "error": "OSError: [Errno 5] Input/output error: '/sys/devices/virtual/neuron_device'",
        "kind": "internal",
        "exit_code": 1,
    }
    with pytest.raises(OSError, match="Input/output error"):  # without --json: the traceback
        cli_main.main(["plan", "--partitions", "2"])


@badinput("unnamed")
@pytest.mark.parametrize("command", [["plan", "--partitions", "2"], ["start", "--head", "--partitions", "2"]])
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_no_active_backend_names_each_backend_and_why(
    command: list[str],
    as_json: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Reasons up front: a Neuron host whose sysfs contradicts itself (a
    one-sided link) makes `plan` and `start` say that no backend is active
    and why each one is not, the neuron backend naming the bad value; exit 1
    as for any run-time failure, nothing started (the state dir not made)."""
    tree = build_tree(tmp_path / "t", "inf2.48xlarge", core_metrics=False)
    (tree.device_dir(0) / "connected_devices").write_text("11, 5\n")  # device 5 does not list 0
    for key, value in tree_only(tree).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("RAYACCEL_STATE_DIR", str(tmp_path / "state"))
    code = main([*command, *(["--json"] if as_json else [])])
    out = capsys.readouterr()
    assert code == 1 and out.out == ""
    lines = out.err.strip().splitlines()
    assert len(lines) == 1, out.err
    message = json.loads(lines[0])["error"] if as_json else lines[0]
    prefix = "" if as_json else "ray-accel: failed: "
    assert message.startswith(f"{prefix}no active accelerator backend on this host; inactive: cuda (")
    assert "neuron (discovery failed: DeviceError: link 'neuron:0' -> 'neuron:5' is one-sided" in message
    assert "mock (RAYACCEL_MOCK is not set)" in message
    if as_json:
        payload = json.loads(lines[0])
        assert payload["exit_code"] == 1 and payload["kind"] == "failure"
        backends = {b["name"]: b for b in payload["backends"]}
        assert backends["neuron"]["active"] is False and "one-sided" in backends["neuron"]["reason"]
    assert not (tmp_path / "state").exists(), "nothing was started or written"


@pytest.mark.parametrize("command", [["plan"], ["start", "--head"]])
def test_agents_is_a_hidden_old_name_of_partitions(command: list[str]) -> None:
    """`--agents N` still means `--partitions N`, with a deprecation warning
    (a line on stderr; with --json inside the JSON document); help and usage
    errors show only `--partitions`."""
    helped = run_cli_here(*command[:1], "--help", env=TRN1)
    assert helped.returncode == 0 and "--partitions" in helped.stdout
    assert "--agents" not in helped.stdout
    refused = run_cli_here(*command, "--agents", "x", env=TRN1)
    assert refused.returncode == 2 and "'--partitions'" in refused.stderr and "--agents" not in refused.stderr
    if command == ["plan"]:
        old, new = (cli_json("plan", flag, "2", env=TRN1)["partitions"] for flag in ("--agents", "--partitions"))
        assert [p["core_ids"] for p in old] == [p["core_ids"] for p in new] == [list(range(16)), list(range(16, 32))]
        warned = run_cli_here("plan", "--agents", "2", env=TRN1)
        assert warned.returncode == 0
        assert "warning: --agents is deprecated: use --partitions\n" in warned.stderr
        assert "--agents" not in warned.stdout


AGENTS_WARNING = "--agents is deprecated: use --partitions"


def test_with_json_the_deprecation_warning_is_inside_the_json_result() -> None:
    """stdout is one JSON document whose `warnings` list carries the warning
    (before the plan's own); no plain warning line on stderr."""
    warned = run_cli_here("plan", "--agents", "2", "--json", env=TRN1)
    assert warned.returncode == 0, warned.stderr
    out = json.loads(warned.stdout)
    assert len(out["partitions"]) == 2
    assert out["warnings"][0] == AGENTS_WARNING
    assert out["warnings"][1:] == cli_json("plan", "--partitions", "2", env=TRN1)["warnings"]
    assert AGENTS_WARNING not in warned.stderr, warned.stderr
    # The new spelling adds no warning.
    assert AGENTS_WARNING not in json.dumps(cli_json("plan", "--partitions", "2", env=TRN1))


@pytest.mark.parametrize("as_subprocess", [False, True])
def test_with_json_the_deprecation_warning_is_inside_the_json_error(as_subprocess: bool) -> None:
    """`plan --agents 3 --json` on a trn1.32xlarge (3 does not divide its 16
    devices): stderr is exactly one JSON object, the warning in its `warnings`."""
    argv = ("plan", "--agents", "3", "--json")
    refused = run_cli(*argv, env=TRN1, timeout=60) if as_subprocess else run_cli_here(*argv, env=TRN1)
    assert refused.returncode == 2 and refused.stdout == ""
    error = json.loads(refused.stderr)  # the whole of stderr: one object, nothing before or after it
    assert error["exit_code"] == 2 and error["kind"] == "input" and "3 partitions" in error["error"], error
    assert error["warnings"] == [AGENTS_WARNING]
    # Without the old spelling the error has no `warnings` key (its schema unchanged).
    plain = run_cli_here("plan", "--partitions", "3", "--json", env=TRN1)
    assert plain.returncode == 2 and "warnings" not in json.loads(plain.stderr)
    # Without --json the warning stays a line of its own, before the error's.
    lines = run_cli_here("plan", "--agents", "3", env=TRN1).stderr.splitlines()
    assert lines[0] == f"warning: {AGENTS_WARNING}" and lines[1].startswith("ray-accel: error: "), lines


def test_a_manual_spec_alone_means_manual_mode() -> None:
    out = cli_json("plan", "--manual", "a=0-7;b=8-15", env=TRN1)
    assert out["mode"] == "manual" and [p["partition"] for p in out["partitions"]] == ["a", "b"]
