"""Work a check child runs on its device, family-agnostic: a matrix product
on the device against the CPU's. Torch is passed in (imported by the child,
never by the decider)."""

from __future__ import annotations

from typing import Any, Final

SEED: Final = 20261207


def matmul_check(torch: Any, device: Any, n: int, rtol: float) -> tuple[str | None, float]:
    """A float32 n x n product on `device` against the CPU's: (None, the
    largest error relative to the largest value) where within `rtol`, else
    (what differed, that error)."""
    generator = torch.Generator().manual_seed(SEED)
    a = torch.randn(n, n, generator=generator, dtype=torch.float32)
    b = torch.randn(n, n, generator=generator, dtype=torch.float32)
    want = a @ b
    got = (a.to(device) @ b.to(device)).cpu()
    if not bool(torch.isfinite(got).all()):
        return f"the {n}x{n} product on {device} holds values that are not finite", float("inf")
    error = float((got - want).abs().max()) / max(float(want.abs().max()), 1e-30)
    if error > rtol:
        return f"the {n}x{n} product on {device} differs from the CPU's by {error:.2e} (relative, over {rtol:g})", error
    return None, error
