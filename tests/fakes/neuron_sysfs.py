"""Fake Neuron sysfs trees, laid out as the Neuron sysfs user guide shows,
with the shapes of the mock presets (which follow the documented hardware)."""

from __future__ import annotations

from pathlib import Path

from ray_accel_mock.spec import load_spec

DEVICE_NAMES = {"Trainium": "Trainium", "Trainium2": "Trainium2", "Inferentia2": "Inferentia2"}
ARCH_TYPES = {"Trainium": "NCv2", "Trainium2": "NCv3", "Inferentia2": "NCv2"}


def _counter(path: Path, total: int, present: int | None = None) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "total").write_text(f"{total}\n")
    (path / "present").write_text(f"{total if present is None else present}\n")


def make_tree(root: Path, preset: str, ecc_uncorrected: dict[int, int] | None = None) -> Path:
    spec = load_spec(preset)
    for d in spec.devices:
        base = root / f"neuron{d.index}"
        physical = int(d.attributes["physical_cores"])
        arch = base / "info" / "architecture"
        arch.mkdir(parents=True)
        (base / "core_count").write_text(f"{physical}\n")
        (base / "connected_devices").write_text(", ".join(p.removeprefix("neuron:") for p in d.peers) + "\n")
        (base / "info" / "serial_number").write_text(f"SN{d.index:06d}\n")
        (arch / "device_name").write_text(DEVICE_NAMES[spec.model] + "\n")
        (arch / "arch_type").write_text(ARCH_TYPES[spec.model] + "\n")
        (arch / "instance_type").write_text(f"{preset}\n")
        for c in range(physical):
            _counter(
                base / f"neuron_core{c}" / "stats" / "memory_usage" / "device_mem", 10**9, (d.index + 1) * 1000 + c
            )
        hw = base / "stats" / "hardware"
        _counter(hw / "mem_ecc_uncorrected", (ecc_uncorrected or {}).get(d.index, 0))
        _counter(hw / "mem_ecc_corrected", 7)
        _counter(hw / "sram_ecc_uncorrected", 0)
    return root
