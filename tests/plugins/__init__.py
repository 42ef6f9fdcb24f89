"""Helpers to register test-only backends through entry points."""

from __future__ import annotations

import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent


def install_test_plugins(target: Path, extra: str = "") -> Path:
    """Make `target` a site dir holding a distribution with our entry points.

    Put it on PYTHONPATH (or sys.path): importlib.metadata then finds the
    `.dist-info` exactly as it finds an installed third-party backend.
    """
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "ray_accel_testplugin.py", target / "ray_accel_testplugin.py")
    info = target / "ray_accel_testplugin-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ray-accel-testplugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[ray_accel.backends]\n"
        "faketpu = ray_accel_testplugin:FakeTPU\n"
        "exploding = ray_accel_testplugin:Exploding\n"
        "absent = ray_accel_testplugin:Absent\n"
        "unimportable = ray_accel_testplugin_missing:Nothing\n" + extra
    )
    return target
