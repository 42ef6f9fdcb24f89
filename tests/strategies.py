"""Hypothesis strategies for random host shapes."""

from __future__ import annotations

from hypothesis import strategies as st
from ray_accel_mock.spec import build_host

from ray_accel.core.devices import Device

TOPOLOGIES = ["none", "ring", "all-to-all"]


@st.composite
def hosts(draw: st.DrawFn, family: str | None = None) -> tuple[Device, ...]:
    fam = family or draw(st.sampled_from(["neuron", "gpu"]))
    count = draw(st.integers(1, 24))
    topology = draw(st.sampled_from([*TOPOLOGIES, "torus"]))
    if topology == "torus":
        rows = draw(st.sampled_from([r for r in range(1, count + 1) if count % r == 0]))
        topology = f"torus:{rows}x{count // rows}"
    cores = draw(st.sampled_from([1, 2, 4, 8])) if fam == "neuron" else 1
    numa = draw(st.integers(1, 4))
    return build_host("hyp", fam, "Model", count, cores, 1 << 30, topology, numa).devices


@st.composite
def host_and_partition_count(draw: st.DrawFn, family: str | None = None) -> tuple[tuple[Device, ...], int]:
    devices = draw(hosts(family))
    count = draw(st.sampled_from([n for n in range(1, len(devices) + 1) if len(devices) % n == 0]))
    return devices, count
