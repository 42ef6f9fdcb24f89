"""Topology: which GPUs are NVLink peers.

P2P status over NVLink (`nvmlDeviceGetP2PStatus(a, b, NVML_P2P_CAPS_INDEX_NVLINK)`)
also covers NVSwitch systems, where every pair reports OK. Link queries are
slow, so this runs once per discovery and the result is kept in the devices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ray_accel.core.devices import Device
from ray_accel_cuda.nvml import NA, GpuLost, Nvml


def nvlink_peers(nvml: Nvml, devices: Sequence[Device], handles: Sequence[Any]) -> dict[str, tuple[str, ...]]:
    """Device id -> ids of its NVLink peers, each pair queried once."""
    module = nvml.module
    nvlink = getattr(module, "NVML_P2P_CAPS_INDEX_NVLINK", 4)
    ok = getattr(module, "NVML_P2P_STATUS_OK", 0)
    peers: dict[str, list[str]] = {d.id: [] for d in devices}
    pairs = list(zip(devices, handles, strict=True))
    for a, (da, ha) in enumerate(pairs):
        for db, hb in pairs[a + 1 :]:
            try:
                status = nvml.query("nvmlDeviceGetP2PStatus", ha, hb, nvlink)
            except GpuLost:
                continue
            if status is not NA and status == ok:
                peers[da.id].append(db.id)
                peers[db.id].append(da.id)
    return {k: tuple(v) for k, v in peers.items()}


def with_peers(devices: Sequence[Device], peers: dict[str, tuple[str, ...]]) -> tuple[Device, ...]:
    return tuple(dataclasses.replace(d, peers=peers.get(d.id, ())) for d in devices)
