"""The CUDA backend's repair (the plan by recovery action, the reset run once
by the documented command, against the fake NVML and a fake nvidia-smi that
records its arguments) and its check (what NVML must say after the work,
the work itself on the CPU, the child where CUDA is not importable)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from ray_accel_cuda import CudaPlugin
from ray_accel_cuda.check import NvmlReading, NvmlWatch, nvml_problems, nvml_summary, pattern_check
from ray_accel_cuda.nvml import Nvml
from ray_accel_cuda.repair import (
    NVIDIA_SMI_ENV,
    GpuState,
    RepairStep,
    plan,
    repair_gpu,
    repair_with_nvml,
    reset_command,
)

from ray_accel.core.checks import CheckOutcome, RepairOutcome, RepairResult
from ray_accel.core.errors import InputError
from ray_accel.plugins.check_work import matmul_check
from tests.fakes import fake_nvidia_smi
from tests.fakes.fake_nvml import (
    FakeGpu,
    RecoveryNvml,
    a100x8_nvlink,
    double_bit_ecc,
    fall_off_the_bus,
    h100x8_recovery,
)

ACTIONS = {
    "NONE": RepairStep.NOTHING,
    "RECOVER_IMEX_DOMAIN": RepairStep.NOTHING,
    "GPU_RESET": RepairStep.RESET,
    "DRAIN_AND_RESET": RepairStep.RESET,
    "DRAIN_P2P": RepairStep.READ_AGAIN,
    "NODE_REBOOT": RepairStep.REBOOT,
    "SYSTEM_REBOOT": RepairStep.REBOOT,
    "BUS_RESET": RepairStep.REBOOT,
    "GPU_RESET_BUS": RepairStep.REBOOT,
    None: RepairStep.OPERATOR,
    "SOMETHING_NEW": RepairStep.OPERATOR,
}


@pytest.mark.parametrize(("action", "step"), ACTIONS.items())
def test_each_recovery_action_has_its_step(action: str | None, step: RepairStep) -> None:
    assert plan(action) is step


def test_the_reset_is_nvidias_documented_command_for_one_gpu() -> None:
    assert reset_command("/usr/bin/nvidia-smi", "GPU-1") == ["/usr/bin/nvidia-smi", "--gpu-reset", "-i", "GPU-1"]


# ------------------------------------------------------------------ the repair over fake NVML


@pytest.fixture
def smi(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    yield fake_nvidia_smi.install(tmp_path)


def repair(nv: RecoveryNvml, index: int, script: Path | None) -> RepairResult:
    environ = {} if script is None else {NVIDIA_SMI_ENV: str(script)}
    return repair_with_nvml(Nvml(nv), nv.gpus[index].uuid, environ)


@pytest.mark.parametrize("action", ["GPU_RESET", "DRAIN_AND_RESET"])
def test_a_reset_action_runs_the_documented_command_exactly_once(smi: tuple[Path, Path], action: str) -> None:
    script, log = smi
    nv = h100x8_recovery()
    nv.gpus[2].recovery_action = action
    result = repair(nv, 2, script)
    assert fake_nvidia_smi.runs(log) == [["--gpu-reset", "-i", nv.gpus[2].uuid]]
    assert (result.outcome, result.action, result.exit_code) == (RepairOutcome.OK, action, 0)
    assert "successfully reset" in result.detail


def test_a_failed_reset_is_failed_with_its_status_and_words(tmp_path: Path) -> None:
    script, log = fake_nvidia_smi.install(tmp_path, status=255)
    nv = h100x8_recovery()
    nv.gpus[0].recovery_action = "GPU_RESET"
    result = repair(nv, 0, script)
    assert len(fake_nvidia_smi.runs(log)) == 1
    assert (result.outcome, result.exit_code) == (RepairOutcome.FAILED, 255)
    assert "In use by another client" in result.detail


@pytest.mark.parametrize(
    ("setup", "outcome", "says"),
    [
        (lambda g: g.processes.append((4242, 1 << 20)), RepairOutcome.FAILED, "pids 4242"),
        (lambda g: g.graphics_processes.append((77, None)), RepairOutcome.FAILED, "pids 77"),
        (lambda g: setattr(g, "persistence", 1), RepairOutcome.OPERATOR, "persistence mode is on"),
        (lambda g: g.unsupported.add("nvmlDeviceGetComputeRunningProcesses"), RepairOutcome.FAILED, "cannot list"),
    ],
    ids=["compute process", "graphics process", "persistence mode", "processes unknown"],
)
def test_no_reset_while_its_preconditions_do_not_hold(
    smi: tuple[Path, Path], setup: Callable[[FakeGpu], object], outcome: RepairOutcome, says: str
) -> None:
    script, log = smi
    nv = h100x8_recovery()
    nv.gpus[1].recovery_action = "GPU_RESET"
    setup(nv.gpus[1])
    result = repair(nv, 1, script)
    assert fake_nvidia_smi.runs(log) == []
    assert (result.outcome, result.exit_code) == (outcome, None)
    assert says in result.detail


@pytest.mark.parametrize(
    ("action", "outcome"),
    [
        ("NODE_REBOOT", RepairOutcome.REBOOT_REQUIRED),
        ("NONE", RepairOutcome.OK),
        ("RECOVER_IMEX_DOMAIN", RepairOutcome.OK),
        ("DRAIN_P2P", RepairOutcome.FAILED),
        (99, RepairOutcome.OPERATOR),
    ],
)
def test_other_actions_run_nothing(smi: tuple[Path, Path], action: str | int, outcome: RepairOutcome) -> None:
    script, log = smi
    nv = h100x8_recovery()
    nv.gpus[4].recovery_action = action
    result = repair(nv, 4, script)
    assert fake_nvidia_smi.runs(log) == [] and result.outcome is outcome


def test_a_driver_without_the_action_or_a_lost_gpu_is_the_operators(smi: tuple[Path, Path]) -> None:
    script, log = smi
    old = a100x8_nvlink()
    result = repair_with_nvml(Nvml(old), old.gpus[0].uuid, {NVIDIA_SMI_ENV: str(script)})
    assert result.outcome is RepairOutcome.OPERATOR and "gives no recovery action" in result.detail
    lost = h100x8_recovery()
    Nvml(lost).ensure()
    lost.discovered = True
    fall_off_the_bus(lost, 3)
    result = repair(lost, 3, script)
    assert result.outcome is RepairOutcome.OPERATOR and "GPU is lost" in result.detail
    assert fake_nvidia_smi.runs(log) == []


def test_no_nvidia_smi_is_a_failed_reset_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    nv = h100x8_recovery()
    nv.gpus[0].recovery_action = "GPU_RESET"
    result = repair(nv, 0, None)
    assert result.outcome is RepairOutcome.FAILED and NVIDIA_SMI_ENV in result.detail


def test_drain_p2p_is_read_again_and_the_next_action_followed_once() -> None:
    readings = iter(
        [
            GpuState("DRAIN_P2P", "NVML recovery action DRAIN_P2P", (), False),
            GpuState("GPU_RESET", "NVML recovery action GPU_RESET", (), False),
        ]
    )
    resets: list[str] = []

    def reset(gpu: str) -> tuple[int | None, str]:
        resets.append(gpu)
        return 0, "reset"

    result = repair_gpu("GPU-9", lambda: next(readings), reset)
    assert resets == ["GPU-9"] and result.outcome is RepairOutcome.OK and result.action == "GPU_RESET"
    assert result.detail.startswith("NVML recovery action DRAIN_P2P: drained, read again: ")


def test_the_plugin_repairs_its_own_gpus_by_the_variables_nvidia_smi(
    smi: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    script, log = smi
    monkeypatch.setenv(NVIDIA_SMI_ENV, str(script))
    nv = h100x8_recovery()
    plugin = CudaPlugin(nvml_module=nv)
    assert plugin.probe() is None
    nv.gpus[6].recovery_action = "DRAIN_AND_RESET"
    result = plugin.repair(nv.gpus[6].uuid)
    assert result.outcome is RepairOutcome.OK and fake_nvidia_smi.runs(log) == [["--gpu-reset", "-i", nv.gpus[6].uuid]]
    with pytest.raises(InputError, match="'GPU-nope' is not a device of this host"):
        plugin.repair("GPU-nope")
    assert len(fake_nvidia_smi.runs(log)) == 1


# ------------------------------------------------------------------ the check


def test_nvml_after_the_work_decides() -> None:
    clean = NvmlReading(3, "NONE")
    assert nvml_problems(clean, clean, (), None) == []
    assert nvml_problems(clean, NvmlReading(3, "RECOVER_IMEX_DOMAIN"), (), None) == []
    assert nvml_problems(NvmlReading(None, None), NvmlReading(None, None), (), None) == []
    problems = nvml_problems(clean, NvmlReading(5, "GPU_RESET"), (48, 63), "nvmlEventSetWait: boom")
    assert problems == [
        "XID 48, 63 during the check",
        "XID events unreadable after the check (nvmlEventSetWait: boom)",
        "uncorrected ECC errors went from 3 to 5 during the check",
        "NVML recovery action GPU_RESET after the check",
    ]
    assert nvml_problems(clean, NvmlReading(3, None, 42), (), None) == [
        "NVML recovery action 42 (not one the binding names)"
    ]
    assert nvml_summary(clean, True) == "NVML: no XID, uncorrected ECC 3 unchanged, recovery action NONE"


def test_the_nvml_watch_sees_an_xid_and_ecc_growth_during_the_check() -> None:
    nv = h100x8_recovery()
    nv.events.append((5, 79))  # before the check: not the check's
    watch = NvmlWatch(Nvml(nv), nv.gpus[5].uuid)
    before = watch.read()
    assert watch.processes() == ()
    double_bit_ecc(nv, 5)
    double_bit_ecc(nv, 4)  # another GPU's: not this check's
    xids, error, read = watch.events()
    after = watch.read()
    assert (xids, error, read) == ((48,), None, True)
    assert nvml_problems(before, after, xids, error) == [
        "XID 48 during the check",
        "uncorrected ECC errors went from 0 to 1 during the check",
    ]


def test_the_work_passes_on_a_device_that_computes_right() -> None:
    assert pattern_check(torch, "cpu", 3 * 1024 * 1024 + 12) is None
    problem, error = matmul_check(torch, "cpu", 128, 1e-4)
    assert problem is None and error < 1e-4


def test_the_work_names_what_came_back_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    real = torch.Tensor.cpu

    def flipped(t: torch.Tensor) -> torch.Tensor:
        out = real(t).clone()
        if out.dtype == torch.int32 and len(out) > 10:
            out[7] ^= 1  # one bit of one word read back wrong
        elif out.dtype == torch.float32:
            out[0, 0] += 1000.0
        return out

    monkeypatch.setattr(torch.Tensor, "cpu", flipped)
    assert (
        pattern_check(torch, "cpu", 4096)
        == "1 of 1024 int32 values written to the GPU read back wrong (first at element 7)"
    )
    problem, _ = matmul_check(torch, "cpu", 64, 1e-4)
    assert problem is not None and "differs from the CPU's" in problem


def test_without_cuda_the_check_is_unavailable_saying_why() -> None:
    nv = h100x8_recovery()
    plugin = CudaPlugin(nvml_module=nv)
    assert plugin.probe() is None
    result = plugin.check(nv.gpus[0].uuid, 60)
    assert result.outcome is CheckOutcome.UNAVAILABLE
    assert "torch.cuda.is_available() is False" in result.detail or "torch is not importable" in result.detail
    with pytest.raises(InputError, match="'GPU-nope' is not a device of this host"):
        plugin.check("GPU-nope", 60)


def test_the_cuda_child_refuses_a_wrong_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    from ray_accel_cuda.check import main

    assert main([]) == 2 and "usage" in capsys.readouterr().err
