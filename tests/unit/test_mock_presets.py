"""The mock backend: every preset has its documented shape."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from ray_accel_mock.spec import GIB, PRESETS, load_spec

from tests.cli_process import CliRunner
from tests.clirun import cli_json_here as cli_json

# name: (family, devices, cores per device, memory per device, peers per device, numa nodes)
SHAPES = {
    "trn1.2xlarge": ("neuron", 1, 2, 32 * GIB, 0, 1),
    "trn1.32xlarge": ("neuron", 16, 2, 32 * GIB, 4, 2),
    "inf2.48xlarge": ("neuron", 12, 2, 32 * GIB, 2, 2),
    "trn2.48xlarge": ("neuron", 16, 4, 96 * GIB, 4, 2),
    # Trainium3: all to all through NeuronSwitch; NUMA layout not published.
    "trn3.48xlarge": ("neuron", 16, 4, 144 * GIB, 15, 1),
    "trn3e.24xlarge": ("neuron", 4, 4, 144 * GIB, 3, 1),
    "trn3pd98.3xlarge": ("neuron", 1, 4, 144 * GIB, 0, 1),
    "p4d.24xlarge": ("gpu", 8, 1, 40 * GIB, 7, 2),
    "p5.48xlarge": ("gpu", 8, 1, 80 * GIB, 7, 2),
}


# Presets of several models, whose devices differ from each other: their
# shapes are checked in tests/unit/test_honest_types.py and below, not by the
# uniform SHAPES test (which assumes one model per host, as every preset did).
MIXED = {
    "mixed-v100-a100": [
        ("Tesla V100-SXM2-16GB", "V100", 16 * GIB, 0),
        *[("NVIDIA A100-SXM4-40GB", "A100", 40 * GIB, 1)] * 2,
    ]
}


def test_every_preset_is_covered() -> None:
    assert set(SHAPES) | set(MIXED) == set(PRESETS)


@pytest.mark.parametrize("preset", sorted(MIXED))
def test_mixed_preset_shape_through_cli(preset: str) -> None:
    out = cli_json("devices", env={"RAYACCEL_MOCK": preset})
    got = [(d["model"], d["accelerator_type"], d["memory_bytes"], len(d["peers"])) for d in out["devices"]]
    assert got == MIXED[preset]
    assert [d["core_ids"] for d in out["devices"]] == [[i] for i in range(len(MIXED[preset]))]
    assert out["host"]["accelerator_type"] is None, "a host of several types has no one type"


@pytest.mark.parametrize("preset", sorted(SHAPES))
def test_preset_shape_through_cli(preset: str) -> None:
    family, count, cores, memory, peers, numa = SHAPES[preset]
    out = cli_json("devices", env={"RAYACCEL_MOCK": preset})
    devices = out["devices"]
    assert len(devices) == count
    all_cores = sorted(c for d in devices for c in d["core_ids"])
    assert all_cores == list(range(count * cores if family == "neuron" else count))
    assert {d["family"] for d in devices} == {family}
    assert {d["memory_bytes"] for d in devices} == {memory}
    assert {len(d["peers"]) for d in devices} == {peers}
    assert len({d["numa_node"] for d in devices}) == numa
    ids = {d["id"] for d in devices}
    for d in devices:
        for p in d["peers"]:
            assert p in ids
            assert d["id"] in next(e for e in devices if e["id"] == p)["peers"], "peers must be symmetric"
    host = out["host"]
    assert host["resource_name"] == ("neuron_cores" if family == "neuron" else "GPU")
    assert host["visible_ids_env"] == ("NEURON_RT_VISIBLE_CORES" if family == "neuron" else "CUDA_VISIBLE_DEVICES")
    assert host["instance_type"] == preset
    assert out["plugins"] == [{"name": "mock", "active": True, "reason": None}] or any(
        p["name"] == "mock" and p["active"] for p in out["plugins"]
    )


def test_trn1_32xlarge_torus_matches_hardware() -> None:
    spec = load_spec("trn1.32xlarge")
    assert spec.devices[0].peers == ("neuron:12", "neuron:3", "neuron:4", "neuron:1")
    assert sorted(c for d in spec.devices for c in d.core_ids) == list(range(32))


def test_trn2_logical_cores() -> None:
    d = load_spec("trn2.48xlarge").devices[3]
    assert d.core_ids == (12, 13, 14, 15)
    assert d.attributes["physical_cores"] == "8"
    assert d.attributes["logical_core_size"] == "2"
    assert load_spec("trn2.48xlarge").accelerator_type == "Trainium2"


@pytest.mark.parametrize("preset", ["trn3.48xlarge", "trn3e.24xlarge", "trn3pd98.3xlarge"])
def test_trn3_logical_cores(preset: str) -> None:
    spec = load_spec(preset)
    assert spec.accelerator_type == "Trainium3" and spec.instance_type == preset
    for d in spec.devices:
        assert d.core_ids == tuple(range(4 * d.index, 4 * d.index + 4))
        assert (d.attributes["physical_cores"], d.attributes["logical_core_size"]) == ("8", "2")


def test_inf2_ring() -> None:
    devices = load_spec("inf2.48xlarge").devices
    assert devices[0].peers == ("neuron:11", "neuron:1")
    degree = Counter(len(d.peers) for d in devices)
    assert degree == {2: 12}


def test_toml_spec(tmp_path: Path, cli: CliRunner) -> None:
    f = tmp_path / "host.toml"
    f.write_text(
        """
[host]
family = "neuron"
model = "Trainium"
cores_per_device = 2
[[devices]]
id = "a"
peers = ["b"]
[[devices]]
id = "b"
cores = 4
peers = [0]
"""
    )
    out = cli_json("devices", env={"RAYACCEL_MOCK": str(f)})
    assert [(d["id"], d["core_ids"], d["peers"]) for d in out["devices"]] == [
        ("a", [0, 1], ["b"]),
        ("b", [2, 3, 4, 5], ["a"]),
    ]


def test_toml_generated_topology(tmp_path: Path) -> None:
    f = tmp_path / "ring.toml"
    f.write_text('[host]\nfamily = "gpu"\ndevices = 4\ntopology = "ring"\nnuma_nodes = 2\n')
    spec = load_spec(str(f))
    assert [len(d.peers) for d in spec.devices] == [2, 2, 2, 2]
    assert [d.numa_node for d in spec.devices] == [0, 0, 1, 1]


BAD = {
    "malformed": ("[host\nfamily=", "malformed TOML"),
    "zero cores": ('[host]\nfamily="neuron"\n[[devices]]\ncores = 0\n', "cores must be a positive integer, got 0"),
    "negative cores": (
        '[host]\nfamily="neuron"\n[[devices]]\ncores = -2\n',
        "cores must be a positive integer, got -2",
    ),
    "gpu zero cores": ('[host]\nfamily="gpu"\n[[devices]]\ncores = 0\n', "got 0"),
    "duplicate ids": ('[host]\nfamily="neuron"\n[[devices]]\nid="x"\n[[devices]]\nid="x"\n', "duplicate device id 'x'"),
    "unknown peer": ('[host]\nfamily="neuron"\n[[devices]]\nid="x"\npeers=["nope"]\n', "peer 'nope'"),
    "bad family": ('[host]\nfamily="tpu"\n[[devices]]\nid="x"\n', "family must be"),
    "one-sided link": ('[host]\nfamily="neuron"\n[[devices]]\nid="x"\npeers=["y"]\n[[devices]]\nid="y"\n', "one-sided"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_toml_exits_2_with_one_line(case: str, tmp_path: Path, cli: CliRunner) -> None:
    text, message = BAD[case]
    f = tmp_path / "bad.toml"
    f.write_text(text)
    proc = cli("devices", env={"RAYACCEL_MOCK": str(f)})
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert proc.stdout == ""


@pytest.mark.parametrize("value", ["no-such-preset", "/nonexistent/file.toml"])
def test_unknown_preset_or_file_exits_2(value: str, cli: CliRunner) -> None:
    proc = cli("devices", env={"RAYACCEL_MOCK": value})
    assert proc.returncode == 2
    assert value in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_unknown_backend_exits_2(cli: CliRunner) -> None:
    proc = cli("devices", "--backend", "nope")
    assert proc.returncode == 2
    assert "unknown backend 'nope'" in proc.stderr


def test_mock_metrics_are_deterministic() -> None:
    from ray_accel_mock import MockPlugin

    a = MockPlugin(load_spec("p5.48xlarge")).telemetry.device_samples()
    b = MockPlugin(load_spec("p5.48xlarge")).telemetry.device_samples()
    assert a == b
    assert len(a) == 8
    assert all(0 <= s.utilization <= 1 for s in a if s.utilization is not None)
