"""Reading `CUDA_VISIBLE_DEVICES` into NVML indexes.

The CUDA runtime accepts, comma-separated, GPU indexes (in nvidia-smi's
order) and GPU UUIDs or a prefix naming one GPU uniquely (`GPU-8932f937`); an
empty value shows no GPU (CUDA Programming Guide, 5.2.1.1
CUDA_VISIBLE_DEVICES). Ray 2.60 also reads `NoDevFiles` as none
(ray/_private/accelerators/nvidia_gpu.py). We also accept index ranges
(`0-3`), as our own masks use them. Where CUDA silently stops at the first
invalid entry (`0,2,-1,1` shows 0 and 2), we refuse the whole value and name
the entry: a mask is input the user can fix.
"""

from __future__ import annotations

from collections.abc import Sequence

from ray_accel.core.devices import Device
from ray_accel.core.visibility import VisibilityError, format_visible_ids, parse_visible_ids

ENV = "CUDA_VISIBLE_DEVICES"
NONE_VISIBLE = "NoDevFiles"
UUID_PREFIXES = ("GPU-", "MIG-")


def _by_uuid(token: str, devices: Sequence[Device]) -> int:
    match = [d.index for d in devices if d.id.startswith(token)]
    if len(match) != 1:
        raise VisibilityError(f"{token!r} in {ENV} matches {len(match)} GPUs")
    return match[0]


def _by_index(token: str, value: str, devices: Sequence[Device]) -> list[int]:
    known = {c for d in devices for c in d.core_ids}
    ids = parse_visible_ids(token) or []
    for i in ids:
        if i not in known:
            raise VisibilityError(
                f"GPU {i} (from {token!r}) in {ENV}={value!r} is out of range: "
                f"this host has GPUs {format_visible_ids(sorted(known), 'ranges') or 'none'}"
            )
    return ids


def parse_cuda_visible(value: str | None, devices: Sequence[Device]) -> list[int] | None:
    """NVML indexes named by `value`, in its order; None when unset (all
    visible), [] for an empty value or NoDevFiles."""
    if value is None:
        return None
    if value.strip() in ("", NONE_VISIBLE):
        return []
    out: list[int] = []
    for raw in value.split(","):
        token = raw.strip()
        if not token:
            raise VisibilityError(f"empty entry in {ENV}={value!r}")
        ids = [_by_uuid(token, devices)] if token.startswith(UUID_PREFIXES) else _by_index(token, value, devices)
        for i in ids:
            if i in out:
                raise VisibilityError(f"duplicate GPU {i} in {ENV}={value!r}")
            out.append(i)
    return out
