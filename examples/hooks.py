"""Example lifecycle hooks.

`ScratchDirHook` gives each workload a scratch directory and removes it when
the workload ends, also after a crash (the ledger reconciles it on restart).
`RecordingHook` writes every call to a log file; the tests count with it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from ray_accel.hooks.config import LifecycleHook, Workload, WorkloadConfig, WorkloadDenied, WorkloadRetry


class ScratchDirHook(LifecycleHook):
    """A per-workload scratch directory, cleaned up after the workload."""

    def _path(self) -> Path:
        # Derived from the workload alone: a restarted process finds it again.
        return Path(tempfile.gettempdir()) / "ray-accel-scratch" / self.workload.workload_id

    def pre_create(self) -> WorkloadConfig:
        self._path().mkdir(parents=True, exist_ok=True)
        return WorkloadConfig(
            env_vars={"SCRATCH_DIR": str(self._path())}, resource_data={"SCRATCH_DIR": str(self._path())}
        )

    def post_terminate(self) -> None:
        shutil.rmtree(self._path(), ignore_errors=True)


class RecordingHook(LifecycleHook):
    """Logs each call as a JSON line; can deny, or ask for one retry."""

    def __init__(self, workload: Workload, log: str, deny: str | None = None, retry_marker: str | None = None) -> None:
        super().__init__(workload)
        self.log, self.deny, self.retry_marker = log, deny, retry_marker

    def _record(self, event: str) -> None:
        line = {"event": event, "workload": self.workload.workload_id, "pid": os.getpid(), "t": time.time()}
        with open(self.log, "a") as f:
            f.write(json.dumps(line) + "\n")

    def pre_create(self) -> WorkloadConfig:
        self._record("pre_create")
        if self.deny:
            raise WorkloadDenied(self.deny)
        if self.retry_marker and not os.path.exists(self.retry_marker):
            Path(self.retry_marker).write_text("retried")
            raise WorkloadRetry("device still being reset")
        return WorkloadConfig(
            env_vars={"EXAMPLE_HOOK_TOKEN": "granted"}, resource_data={"LEASE": self.workload.workload_id}
        )

    def post_create(self) -> None:
        self._record("post_create")

    def pre_terminate(self) -> None:
        self._record("pre_terminate")

    def post_terminate(self) -> None:
        self._record("post_terminate")


class Recording:
    """A picklable factory: `AcceleratorTorchConfig(hooks=[Recording(log)])`."""

    def __init__(self, log: str, deny: str | None = None, retry_marker: str | None = None) -> None:
        self.log, self.deny, self.retry_marker = log, deny, retry_marker

    def __call__(self, workload: Workload) -> RecordingHook:
        return RecordingHook(workload, self.log, self.deny, self.retry_marker)
