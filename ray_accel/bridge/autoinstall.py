"""Imported into every worker of a ray-accel raylet (RAY_preload_python_modules).

Installs the bridge from RAYACCEL_BRIDGE_SPEC (set by whoever started the
raylet) and re-reads the inherited masks through it. A failure here is logged,
never raised: a worker that cannot install the bridge still runs, with Ray's
own masking.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def _autoinstall() -> None:
    from ray_accel.bridge.managers import SPEC_ENV, install, specs_from_env
    from ray_accel.rayapi.accelerators import refresh_original_visible_ids

    if specs := specs_from_env(os.environ.get(SPEC_ENV)):
        install(specs)
        refresh_original_visible_ids()  # Ray recorded them at import, through its own managers


try:
    _autoinstall()
except Exception as e:  # a worker must start even if the bridge cannot
    log.warning("ray-accel bridge not installed in this worker: %s", e)
