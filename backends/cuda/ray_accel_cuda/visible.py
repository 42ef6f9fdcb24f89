"""Reading `CUDA_VISIBLE_DEVICES` as CUDA does, into NVML device indexes.

CUDA C Programming Guide, "CUDA Environment Variables": the value is "a
comma-separated sequence of GPU identifiers ... given as integer indices or as
UUID strings", UUIDs "in the same format as given by nvidia-smi, such as
GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", and "abbreviated forms are allowed;
simply specify enough digits from the beginning of the GPU UUID to uniquely
identify that GPU". Ray writes `NoDevFiles` for "no GPU". Where CUDA silently
stops at the first identifier it cannot match, this reader refuses the mask,
naming the token: a mask is what the user (or Slurm) set.
"""

from __future__ import annotations

from collections.abc import Sequence

from ray_accel.core.devices import Device
from ray_accel.core.visibility import VisibilityError, parse_visible_ids

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


def parse_cuda_visible(value: str | None, devices: Sequence[Device]) -> list[int] | None:
    """Device indexes in the mask's order; None when unset, [] for none."""
    if value is None:
        return None
    if value.strip() in ("", "NoDevFiles"):
        return []
    out: list[int] = []
    for token in (t.strip() for t in value.split(",")):
        if token.startswith(("GPU-", "MIG-")):
            match = [d.index for d in devices if d.id.startswith(token)]
            if len(match) != 1:
                raise VisibilityError(f"{token!r} in {VISIBLE_ENV} matches {len(match)} GPUs")
            ids = match
        else:
            ids = parse_visible_ids(token, total=len(devices)) or []
        for i in ids:
            if i in out:
                raise VisibilityError(f"duplicate GPU {i} in {VISIBLE_ENV} {value!r}")
            out.append(i)
    return out
