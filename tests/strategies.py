"""Hypothesis strategies for random host shapes."""

from __future__ import annotations

from hypothesis import strategies as st
from ray_accel_mock.spec import build_host

from ray_accel.core.devices import Device
from ray_accel.core.health import HealthEvent
from ray_accel.core.health_kept import KeptDevice
from ray_accel.core.health_track import Fault

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


D = "neuron:9"


words = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF), min_size=1, max_size=20)


events = st.builds(
    HealthEvent,
    device_id=st.just(D),
    kind=st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True),
    code=st.none() | words,
    reason=words,
    at=st.floats(0, 1e10),
    fatal=st.booleans(),
)


faults = st.builds(Fault, kind=words, event=events, sticky=st.booleans(), clean=st.integers(0, 9), clean_words=words)


kept_devices = st.builds(
    KeptDevice,
    device_id=st.just(D),
    since=st.floats(0, 1e10),
    faults=st.lists(faults, max_size=3).map(tuple),
    counters=st.dictionaries(words, st.integers(0, (1 << 32) - 1), max_size=3),
    doubt=st.just("") | words,
)
