"""Repairing one GPU as its driver asks: the plan (pure) and the reset.

What each recovery action asks (NVIDIA, "Error Recovery and Response
Flags", https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html;
the names as docs/gpu-health.md reads them from the installed binding):

- NONE: nothing; RECOVER_IMEX_DOMAIN: scoped to the IMEX domain, not the
  GPU (non-fatal, as NVIDIA's DRA driver takes it): nothing run on the GPU.
- GPU_RESET, DRAIN_AND_RESET: reset the GPU once no process uses it:
  `nvidia-smi --gpu-reset -i <id>` (the nvidia-smi manual, `-r,
  --gpu-reset`: it requires root and no application using the GPU). It is
  run only where NVML lists no compute or graphics process on the GPU and
  its persistence mode is off (NVIDIA NVSentinel turns it off first, or the
  reset fails "In use by another client": NVIDIA/NVSentinel#1690 and
  NVIDIA/NVSentinel#1692). ray-accel never changes persistence mode, a host
  setting: with it on, the repair is the operator's.
- DRAIN_P2P: quiesce peer-to-peer traffic, then read the action again,
  "which will return one of the other actions": the caller has drained the
  GPU (its partition's raylet ended), so the action is read again and that
  one is followed, once.
- NODE_REBOOT, SYSTEM_REBOOT, BUS_RESET (GPU_RESET_BUS in the copy of the
  binding Ray bundles): NVIDIA documents no per-GPU command for them, so
  "reboot required" and nothing run.
- An action the binding does not name, or none readable: the operator's.

`RAYACCEL_NVIDIA_SMI` names the nvidia-smi to run (tests give a fake that
records its arguments); by default `nvidia-smi` on PATH.
"""

from __future__ import annotations

import enum
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ray_accel.core.checks import RepairOutcome, RepairResult, short
from ray_accel_cuda.health import RecoveryUnreadable, action_names, recovery_action
from ray_accel_cuda.nvml import NA, GpuLost, Nvml, NvmlUnavailable, error_code

NVIDIA_SMI_ENV: Final = "RAYACCEL_NVIDIA_SMI"
NVIDIA_SMI: Final = "nvidia-smi"
RESET_TIMEOUT_S: Final = 120.0  # a reset that hangs this long is a failed one; the command is killed
NOTHING_ACTIONS: Final = frozenset({"NONE", "RECOVER_IMEX_DOMAIN"})
RESET_ACTIONS: Final = frozenset({"GPU_RESET", "DRAIN_AND_RESET"})
REBOOT_ACTIONS: Final = frozenset({"NODE_REBOOT", "SYSTEM_REBOOT", "BUS_RESET", "GPU_RESET_BUS"})
READ_AGAIN_ACTIONS: Final = frozenset({"DRAIN_P2P"})
UNREAD: Final = "unread"  # the action word of a GPU whose recovery action cannot be read


class RepairStep(enum.Enum):
    NOTHING = "nothing"
    RESET = "reset"
    READ_AGAIN = "read again"
    REBOOT = "reboot"
    OPERATOR = "operator"


def plan(action: str | None) -> RepairStep:
    """What to do for the recovery action `action` (the binding's name less
    its prefix; None: unreadable or a value the binding does not name)."""
    if action in NOTHING_ACTIONS:
        return RepairStep.NOTHING
    if action in RESET_ACTIONS:
        return RepairStep.RESET
    if action in READ_AGAIN_ACTIONS:
        return RepairStep.READ_AGAIN
    if action in REBOOT_ACTIONS:
        return RepairStep.REBOOT
    return RepairStep.OPERATOR


def reset_command(nvidia_smi: str, gpu: str) -> list[str]:
    """NVIDIA's command that resets the one GPU `gpu` (its UUID: `-i` takes an
    index, a UUID or a PCI bus id, and a UUID cannot name another GPU)."""
    return [nvidia_smi, "--gpu-reset", "-i", gpu]


def nvidia_smi_path(environ: Mapping[str, str]) -> str | None:
    """The nvidia-smi to run: `RAYACCEL_NVIDIA_SMI` where set, else the one on PATH."""
    return environ.get(NVIDIA_SMI_ENV) or shutil.which(NVIDIA_SMI)


@dataclass(frozen=True)
class GpuState:
    """What the repair reads of the GPU before it acts."""

    action: str | None  # None: unreadable, or a value the binding does not name
    action_why: str  # how the action was read ("NVML recovery action GPU_RESET", or why not)
    processes: tuple[int, ...] | None  # PIDs NVML lists on it; None: NVML cannot list them
    persistence: bool | None  # persistence mode on; None: unknown


def reset_blocker(state: GpuState) -> str | None:
    """Why the GPU may not be reset now; None where it may."""
    if state.processes is None:
        return "NVML cannot list the processes on the GPU, so none can be ruled out"
    if state.processes:
        pids = ", ".join(str(p) for p in state.processes)
        return f"NVML lists processes on the GPU (pids {pids}); the reset needs none"
    if state.persistence:
        return (
            "persistence mode is on and the reset fails with it on ('In use by another client'); "
            "ray-accel does not change it: turn it off (nvidia-smi -i <id> -pm 0) or reset the GPU by hand"
        )
    return None


def _processes(nvml: Nvml, h: Any) -> tuple[int, ...] | None:
    compute = nvml.query("nvmlDeviceGetComputeRunningProcesses", h)
    if compute is NA:
        return None
    graphics = nvml.query("nvmlDeviceGetGraphicsRunningProcesses", h, default=[])
    return tuple(sorted({int(p.pid) for p in [*compute, *graphics]}))


def read_state(nvml: Nvml, h: Any) -> GpuState:
    """The GPU's recovery action, processes and persistence mode, from NVML."""
    try:
        recovery = recovery_action(nvml, h, action_names(nvml.module))
    except RecoveryUnreadable as e:
        action, why = None, str(e)
    else:
        if recovery is None:
            action, why = None, "the driver or binding gives no recovery action for it"
        else:
            action, why = recovery.name, recovery.reason()
    mode = nvml.query("nvmlDeviceGetPersistenceMode", h)
    return GpuState(action, why, _processes(nvml, h), None if mode is NA else bool(mode))


@dataclass(frozen=True)
class Reset:
    """How the reset command is run; tests give a fake nvidia-smi."""

    nvidia_smi: str | None
    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run

    def __call__(self, gpu: str) -> tuple[int | None, str]:
        """Run the reset once: its exit status (None: it could not run) and what it said."""
        if self.nvidia_smi is None:
            return None, f"{NVIDIA_SMI} is not on PATH (set {NVIDIA_SMI_ENV} to its path)"
        command = reset_command(self.nvidia_smi, gpu)
        try:
            done = self.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=RESET_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None, f"{' '.join(command)} did not end within {RESET_TIMEOUT_S:g} s and was killed"
        except OSError as e:
            return None, f"{' '.join(command)} could not run: {e.strerror or e}"
        said = " ".join((done.stdout + " " + done.stderr).split())
        return done.returncode, f"{' '.join(command)} exited with status {done.returncode}: {said or 'no output'}"


def decide(state: GpuState, note: str = "") -> tuple[RepairOutcome, str] | None:
    """The outcome where nothing is to be run, or None where the reset is to
    run now; `note` goes before the detail."""
    step = plan(state.action)
    if step is RepairStep.READ_AGAIN:
        return RepairOutcome.FAILED, f"{note}{state.action_why}: still asked after the drain; try again later"
    if step is RepairStep.NOTHING:
        return RepairOutcome.OK, f"{note}{state.action_why}: nothing to run"
    if step is RepairStep.REBOOT:
        return (
            RepairOutcome.REBOOT_REQUIRED,
            f"{note}{state.action_why}: NVIDIA documents no per-GPU command; nothing run",
        )
    if step is RepairStep.OPERATOR:
        return RepairOutcome.OPERATOR, f"{note}{state.action_why}: no repair ray-accel may run; the operator's"
    blocker = reset_blocker(state)
    if blocker is None:
        return None
    # Persistence mode is a host setting, not ours to change: a person's call.
    outcome = RepairOutcome.OPERATOR if state.persistence else RepairOutcome.FAILED
    return outcome, f"{note}{state.action_why}: not reset: {blocker}"


def repair_gpu(
    device_id: str,
    read: Callable[[], GpuState],
    reset: Callable[[str], tuple[int | None, str]],
    clock: Callable[[], float] = time.time,
) -> RepairResult:
    """Repair the GPU as its recovery action asks: `read` reads its state
    (again after DRAIN_P2P, once), `reset` runs the reset command, at most once."""
    started = clock()
    state = read()
    note = ""
    if plan(state.action) is RepairStep.READ_AGAIN:
        # The caller drained the GPU before asking: NVIDIA's next step is to read the action again.
        note = f"{state.action_why}: drained, read again: "
        state = read()
    decided = decide(state, note)
    code: int | None = None
    if decided is None:
        code, said = reset(device_id)
        decided = (RepairOutcome.OK if code == 0 else RepairOutcome.FAILED), f"{note}{state.action_why}: {said}"
    outcome, detail = decided
    return RepairResult(
        device_id=device_id,
        outcome=outcome,
        detail=short(detail),
        action=state.action or UNREAD,
        started=started,
        ended=max(started, clock()),
        exit_code=code,
    )


def repair_with_nvml(
    nvml: Nvml,
    device_id: str,
    environ: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.time,
) -> RepairResult:
    """`repair_gpu` of the GPU whose UUID is `device_id`, over NVML and the
    real (or `RAYACCEL_NVIDIA_SMI`) nvidia-smi."""
    env = os.environ if environ is None else environ
    started = clock()
    try:
        h = nvml.query("nvmlDeviceGetHandleByUUID", device_id)
        return repair_gpu(device_id, lambda: read_state(nvml, h), Reset(nvidia_smi_path(env)), clock)
    except Exception as e:
        # NVML's own errors (no driver, a lost GPU, an error code) end here,
        # named; anything else is a fault of this code and is raised.
        if not isinstance(e, NvmlUnavailable | GpuLost) and error_code(e) is None:
            raise
        return RepairResult(
            device_id=device_id,
            outcome=RepairOutcome.OPERATOR,
            detail=short(f"NVML cannot read the GPU ({e}); the repair is the operator's"),
            action=UNREAD,
            started=started,
            ended=max(started, clock()),
        )
