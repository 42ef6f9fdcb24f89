"""Installs the fake TorchNeuron (`tests/fakes/torch_neuronx_fake.py`) the way
the real one is found: a site directory holding the module `torch_neuronx`
and an installed distribution's `.dist-info` whose `entry_points.txt` names
it in the `torch.backends` group, which `import torch` loads (torch 2.13,
`torch/__init__.py` `_import_device_backends`; TorchNeuron's own
pyproject.toml declares `torch_neuronx = "torch_neuronx:_autoload"`).

Put the directory on the PYTHONPATH of a test cluster's raylets (their
workers inherit it), never on the test process's own path.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.fakes.torch_neuronx_fake import RECORD_ENV

HERE = Path(__file__).resolve().parent
VERSION = "2.13.3.0+fake"

__all__ = ["RECORD_ENV", "install", "records"]


def install(target: Path) -> Path:
    """Make `target` a site directory with the fake installed; return it."""
    package = target / "torch_neuronx"
    package.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "torch_neuronx_fake.py", package / "__init__.py")
    info = target / f"torch_neuronx-{VERSION}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch-neuronx\nVersion: {VERSION}\n")
    (info / "entry_points.txt").write_text("[torch.backends]\ntorch_neuronx = torch_neuronx:_autoload\n")
    return target


def records(where: Path) -> list[dict[str, Any]]:
    """What every process that loaded the fake wrote (one row per process)."""
    return [json.loads(p.read_text()) for p in sorted(where.glob("*.json"))]
