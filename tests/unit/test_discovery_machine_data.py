"""What a driver reports is data, what the user wrote is input.

NVML reporting one UUID for several GPUs (Ray's own NVML test data does
exactly this: GPU_MOCK_DATA in python/ray/tests/accelerators/test_nvidia_gpu.py,
served by python/ray/tests/accelerators/mock_pynvml.py's PyNVMLMock; see
tests/fakes/fake_nvml.py) makes the cuda backend inactive with a reason naming
the value, while another active backend and the CLI go on (exit 0). A bad mock
spec, which the user wrote, still exits 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ray_accel.cli import main
from tests.badinput import badinput
from tests.cli_process import CliRunner
from tests.fakes import fake_nvml
from tests.plugins import install_test_plugins


@pytest.fixture
def duplicate_uuid_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> fake_nvml.FakeNvml:
    """The real cuda entry point, with `import pynvml` answering Ray's data, and
    the test-only backends (one of them active) registered beside it."""
    monkeypatch.syspath_prepend(str(install_test_plugins(tmp_path / "site")))
    nv = fake_nvml.ray_duplicate_uuid()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    return nv


@badinput("unnamed")
def test_inconsistent_nvml_data_makes_only_cuda_inactive(
    duplicate_uuid_nvml: fake_nvml.FakeNvml, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["devices", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    payload = json.loads(out.out)
    plugins = {p["name"]: p for p in payload["plugins"]}
    cuda = plugins["cuda"]
    assert cuda["active"] is False
    assert repr(fake_nvml.RAY_MOCK_UUID) in cuda["reason"] and "GPUs 0, 1, 2" in cuda["reason"]
    assert duplicate_uuid_nvml.calls["nvmlDeviceGetUUID"] == 3, "the cuda backend really read the fake NVML"
    assert plugins["faketpu"]["active"] is True
    assert [d["id"] for d in payload["devices"]] == ["chip0", "chip1", "chip2", "chip3"]
    assert payload["host"]["resource_name"] == "FAKETPU"


def test_inconsistent_nvml_data_text_view(
    duplicate_uuid_nvml: fake_nvml.FakeNvml, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["devices"]) == 0
    cuda_row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("cuda "))
    assert " no " in cuda_row and fake_nvml.RAY_MOCK_UUID in cuda_row


@badinput("exit-code")
def test_a_bad_mock_spec_is_still_input_and_exits_2(tmp_path: Path, cli: CliRunner) -> None:
    spec = tmp_path / "dup.toml"
    spec.write_text('[host]\nfamily="gpu"\n[[devices]]\nid="GPU-same"\n[[devices]]\nid="GPU-same"\n')
    proc = cli("devices", "--json", env={"RAYACCEL_MOCK": str(spec)})
    assert proc.returncode == 2
    error = json.loads(proc.stderr)
    assert error["kind"] == "input" and "duplicate device id 'GPU-same'" in error["error"]
    assert proc.stdout == ""
