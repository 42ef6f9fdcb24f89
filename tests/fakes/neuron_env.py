"""Environments that point the Neuron backend at its fakes (for CLI-level tests).

Every seam is set explicitly, so nothing of this machine's /sys, /dev or
PATH leaks in: RAYACCEL_SYS_ROOT (PCI, DMI), RAYACCEL_NEURON_SYSFS_ROOT,
RAYACCEL_NEURON_DEV_ROOT, RAYACCEL_NEURON_LS.
"""

from __future__ import annotations

import shutil
import stat
import sys
from pathlib import Path

from tests.fakes.neuron_sysfs import NeuronSysfs

FAKES = Path(__file__).resolve().parent
LS_STUB = FAKES / "neuron_ls_stub.py"
MONITOR_STUB = FAKES / "neuron_monitor_stub.py"
# A PATH without any Neuron tool, so "no neuron-ls" means exactly that.
BARE_PATH = "/usr/bin:/bin"


def executable(path: Path, script: Path) -> Path:
    """A shell wrapper that runs `script` with this interpreter (what a tool on PATH looks like)."""
    path.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def no_tools() -> dict[str, str]:
    assert shutil.which("neuron-ls", path=BARE_PATH) is None
    assert not Path("/opt/aws/neuron/bin/neuron-ls").exists(), "this machine has a real neuron-ls"
    return {"PATH": BARE_PATH}


def ls_only(tmp: Path, stub: Path, fixture: str | None = None, **extra: str) -> dict[str, str]:
    """neuron-ls alone: no sysfs, no /dev nodes, no PCI or DMI."""
    env = {
        "RAYACCEL_SYS_ROOT": str(tmp / "no-sys"),
        "RAYACCEL_NEURON_SYSFS_ROOT": str(tmp / "no-sys" / "devices" / "virtual" / "neuron_device"),
        "RAYACCEL_NEURON_DEV_ROOT": str(tmp / "no-dev"),
        "RAYACCEL_NEURON_LS": str(stub),
        "PATH": BARE_PATH,
        **extra,
    }
    if fixture:
        env["STUB_FIXTURE"] = fixture
    return env


def tree_only(tree: NeuronSysfs, **extra: str) -> dict[str, str]:
    """The sysfs tree (with its /dev, PCI, DMI) and no neuron-ls anywhere."""
    return {
        **no_tools(),
        "RAYACCEL_NEURON_SYSFS_ROOT": str(tree.neuron_root),
        "RAYACCEL_NEURON_DEV_ROOT": str(tree.dev_root),
        **extra,
    }


def tree_and_ls(tree: NeuronSysfs, stub: Path, fixture: str, **extra: str) -> dict[str, str]:
    return {**tree_only(tree), "RAYACCEL_NEURON_LS": str(stub), "STUB_FIXTURE": fixture, **extra}
