"""The CUDA check child: `python -m ray_accel_cuda.check GPU-UUID`.

Run by `CudaPlugin.check` through `ray_accel.plugins.check_runner`, with
CUDA_VISIBLE_DEVICES naming that one GPU. Where torch with CUDA is
importable:

1. NVML first: the GPU's XID events registered, its uncorrected ECC count
   read; a GPU on which NVML lists a process is `busy` (the check would
   share it, and its work is not ours to disturb).
2. A pattern written over a share of the GPU's free memory (a quarter, at
   most `MAX_PATTERN_BYTES`) and read back to the CPU, compared with the
   same pattern made on the CPU.
3. A matrix product of float32 matrices on the GPU (TF32 off) against the
   CPU's, within `MATMUL_RTOL` of the largest value.
4. NVML again: no XID event during the check, the uncorrected ECC count
   unchanged, and the recovery action NONE (or RECOVER_IMEX_DOMAIN, not
   the GPU's) where the driver gives it.

Where torch or its CUDA is not importable: `unavailable`, with why.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Final

from ray_accel.core.checks import CheckOutcome
from ray_accel.plugins.check_runner import run_body
from ray_accel.plugins.check_work import SEED, matmul_check
from ray_accel_cuda.health import PollErrors, XidMonitor, action_names, ecc_uncorrected, recovery_action
from ray_accel_cuda.nvml import Nvml, NvmlUnavailable, error_code
from ray_accel_cuda.repair import NOTHING_ACTIONS

GIB: Final = 1 << 30
SHARE: Final = 0.25  # of the free memory, so a check leaves room for what the driver itself needs
MAX_PATTERN_BYTES: Final = 4 * GIB  # read back to the CPU: bounded so the check stays short
CHUNK_ELEMENTS: Final = 16 << 20  # int32 elements per copy back (64 MiB)
MATMUL_N: Final = 1024
MATMUL_RTOL: Final = 1e-4  # float32 sums of 1024 terms differ by order of summation far below this


def pattern(torch: Any, start: int, count: int, device: Any) -> Any:
    """Elements `start` .. `start + count` of the check's int32 pattern, made
    on `device` (the same integer arithmetic everywhere, so the GPU's and the
    CPU's agree exactly)."""
    index = torch.arange(start, start + count, dtype=torch.int64, device=device)
    return ((index * 2654435761 + SEED) % 2147483647).to(torch.int32)


def pattern_check(torch: Any, device: Any, nbytes: int) -> str | None:
    """Write the pattern over `nbytes` of `device`'s memory, read it back;
    None where every element came back, else what did not."""
    total = nbytes // 4
    buffer = torch.empty(total, dtype=torch.int32, device=device)
    for start in range(0, total, CHUNK_ELEMENTS):
        count = min(CHUNK_ELEMENTS, total - start)
        buffer[start : start + count] = pattern(torch, start, count, device)
    bad = 0
    first: int | None = None
    for start in range(0, total, CHUNK_ELEMENTS):
        count = min(CHUNK_ELEMENTS, total - start)
        got = buffer[start : start + count].cpu()
        wrong = (got != pattern(torch, start, count, "cpu")).nonzero()
        if len(wrong):
            bad += len(wrong)
            first = start + int(wrong[0]) if first is None else first
    del buffer
    if bad:
        return f"{bad} of {total} int32 values written to the GPU read back wrong (first at element {first})"
    return None


@dataclass(frozen=True)
class NvmlReading:
    ecc: int | None  # uncorrected volatile count; None: unsupported
    action: str | None  # the recovery action's name; None: the driver or binding gives none
    action_value: int | None = None  # the value where the binding does not name it


def nvml_problems(before: NvmlReading, after: NvmlReading, xids: tuple[int, ...], xid_error: str | None) -> list[str]:
    """What NVML says went wrong during the check (empty: nothing)."""
    problems = []
    if xids:
        problems.append(f"XID {', '.join(str(x) for x in xids)} during the check")
    if xid_error is not None:
        problems.append(f"XID events unreadable after the check ({xid_error})")
    if before.ecc is not None and after.ecc is not None and after.ecc != before.ecc:
        problems.append(f"uncorrected ECC errors went from {before.ecc} to {after.ecc} during the check")
    if after.action is None and after.action_value is not None:
        problems.append(f"NVML recovery action {after.action_value} (not one the binding names)")
    elif after.action is not None and after.action not in NOTHING_ACTIONS:
        problems.append(f"NVML recovery action {after.action} after the check")
    return problems


def nvml_summary(after: NvmlReading, xids_read: bool) -> str:
    parts = ["no XID" if xids_read else "XID events not supported"]
    parts.append("uncorrected ECC not supported" if after.ecc is None else f"uncorrected ECC {after.ecc} unchanged")
    parts.append("recovery action not given" if after.action is None else f"recovery action {after.action}")
    return "NVML: " + ", ".join(parts)


class NvmlWatch:
    """NVML's view of the one GPU, before and after the work."""

    def __init__(self, nvml: Nvml, uuid: str) -> None:
        self.nvml = nvml
        self.handle = nvml.query("nvmlDeviceGetHandleByUUID", uuid)
        self.xids = XidMonitor(nvml, {uuid: self.handle}, lambda: 0.0, PollErrors(), ignored=frozenset())
        self.xids.poll()  # registers, and drains what came before the check
        self.names = action_names(nvml.module)

    def read(self) -> NvmlReading:
        recovery = recovery_action(self.nvml, self.handle, self.names)
        ecc = ecc_uncorrected(self.nvml, self.handle)
        if recovery is None:
            return NvmlReading(ecc, None)
        return NvmlReading(ecc, recovery.name, None if recovery.name else recovery.value)

    def processes(self) -> tuple[int, ...]:
        listed = self.nvml.query("nvmlDeviceGetComputeRunningProcesses", self.handle, default=[])
        return tuple(sorted({int(p.pid) for p in listed}))

    def events(self) -> tuple[tuple[int, ...], str | None, bool]:
        """(the XIDs since the first poll, why they could not be read, whether they were read)."""
        poll = self.xids.poll()
        return tuple(x for _, x in poll.events), poll.error, poll.supported


def cuda_check(uuid: str, nvml: Nvml) -> tuple[CheckOutcome, str]:
    """The check body: see the module's docstring."""
    try:
        import torch
    except ImportError as e:
        return CheckOutcome.UNAVAILABLE, f"torch is not importable here ({e})"
    if not torch.cuda.is_available():
        return (
            CheckOutcome.UNAVAILABLE,
            f"torch {torch.__version__} has no usable CUDA here (torch.cuda.is_available() is False)",
        )
    seen = torch.cuda.device_count()
    if seen != 1:
        return CheckOutcome.FAILED, f"the check sees {seen} GPUs, not the one it was given ({uuid})"
    try:
        watch: NvmlWatch | None = NvmlWatch(nvml, uuid)
    except NvmlUnavailable as e:
        watch, unwatched = None, f"NVML not read ({e})"
    except Exception as e:
        if error_code(e) is None:
            raise
        watch, unwatched = None, f"NVML not read ({type(e).__name__}: {e})"
    before = None
    if watch is not None:
        busy = watch.processes()
        if busy:
            return CheckOutcome.BUSY, f"NVML lists processes on the GPU (pids {', '.join(map(str, busy))})"
        before = watch.read()
    free, _ = torch.cuda.mem_get_info(0)
    nbytes = min(int(free * SHARE), MAX_PATTERN_BYTES) // 4 * 4
    torch.backends.cuda.matmul.allow_tf32 = False
    device = torch.device("cuda", 0)
    problems = []
    written = pattern_check(torch, device, nbytes)
    if written is not None:
        problems.append(written)
    product, error = matmul_check(torch, device, MATMUL_N, MATMUL_RTOL)
    if product is not None:
        problems.append(product)
    torch.cuda.synchronize()
    summary = unwatched if watch is None else ""
    if watch is not None and before is not None:
        xids, xid_error, xids_read = watch.events()
        after = watch.read()
        problems += nvml_problems(before, after, xids, xid_error)
        summary = nvml_summary(after, xids_read)
    if problems:
        return CheckOutcome.FAILED, "; ".join(problems)
    work = (
        f"{nbytes / GIB:.2f} GiB written and read back, {MATMUL_N}x{MATMUL_N} product within {error:.1e} of the CPU's"
    )
    return CheckOutcome.PASSED, f"{work}; {summary}"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m ray_accel_cuda.check GPU-UUID", file=sys.stderr)
        return 2
    return run_body(lambda: cuda_check(argv[0], Nvml()))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
