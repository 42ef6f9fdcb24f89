"""Running the lifecycle hooks of one workload in this process, in order.

A denial or a retry request in `pre_create` still gets its `post_terminate`,
so the counts always match; a process that dies is covered by the ledger.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Collection, Sequence
from pathlib import Path

from ray_accel.hooks.config import (
    PROTECTED_ENV_VARS,
    RESOURCE_FILE_ENV,
    HookConfigError,
    Workload,
    WorkloadConfig,
    WorkloadDenied,
    WorkloadRetry,
)
from ray_accel.hooks.ledger import HookFactory, entry_path, hook_name, open_entry
from ray_accel.plugins.discovery import declarations

log = logging.getLogger(__name__)


def protected_env(extra: Collection[str] = ()) -> frozenset[str]:
    """What no hook may set here: ray-accel's own variables, every installed
    backend's protected variables (read from their classes, no hardware
    probed), and `extra` (what the runtime set for this workload)."""
    return PROTECTED_ENV_VARS | declarations().protected_env | frozenset(extra)


class HookRun:
    """The hooks of one workload in this process, in order."""

    def __init__(self, run_id: str, workload: Workload, factories: Sequence[HookFactory]) -> None:
        self.run_id, self.workload, self.factories = run_id, workload, list(factories)
        self.hooks = [f(workload) for f in self.factories]
        self._entry = entry_path(run_id, workload.workload_id)
        self.resource_file: Path | None = None
        self._terminated = False

    def pre_create(self, protected: Collection[str] | None = None) -> WorkloadConfig:
        """Run every pre_create; apply their env vars and resource data here.

        `protected`: the variables no hook may set (default `protected_env()`);
        a hook that sets one is refused, naming it and the hook. A denial or
        a retry request still gets its post_terminate, so the counts always
        match.
        """
        protected = protected_env() if protected is None else protected
        open_entry(self.run_id, self.workload, self.factories)
        # Key -> (the hook that set it, its value).
        merged_env: dict[str, tuple[str, str]] = {}
        merged_data: dict[str, tuple[str, str]] = {}
        try:
            for factory, hook in zip(self.factories, self.hooks, strict=True):
                try:
                    config = hook.pre_create()
                except (WorkloadDenied, WorkloadRetry) as e:
                    denied = isinstance(e, WorkloadDenied)
                    kind, said = (WorkloadDenied, "denied workload") if denied else (WorkloadRetry, "asked to retry")
                    raise kind(f"hook {hook_name(factory)} {said} {self.workload.workload_id}: {e}") from e
                except HookConfigError as e:
                    # Raised while the hook builds its WorkloadConfig (e.g. a
                    # visibility variable): name the hook, as for a clash below.
                    raise WorkloadDenied(f"hook {hook_name(factory)} returned a config that is not allowed: {e}") from e
                if not isinstance(config, WorkloadConfig):
                    raise TypeError(f"hook {hook_name(factory)}.pre_create returned {type(config).__name__}")
                clash = sorted(set(config.env_vars) & set(protected))
                if clash:
                    # Overriding a rank, collective or visibility variable would
                    # break the job for every worker: refuse the run outright.
                    raise WorkloadDenied(
                        f"hook {hook_name(factory)} may not set {', '.join(clash)}: "
                        "ray-accel sets it for this worker's ranks, collective or devices"
                    )
                for merged, given, what in (
                    (merged_env, config.env_vars, "environment variable"),
                    (merged_data, config.resource_data, "resource_data key"),
                ):
                    for key, value in given.items():
                        if key in merged and merged[key][1] != value:
                            # Neither may silently win: the order of hooks is not a contract.
                            raise WorkloadDenied(
                                f"hooks {merged[key][0]} and {hook_name(factory)} set {what} {key} to different "
                                f"values ({merged[key][1]!r}, {value!r})"
                            )
                        merged[key] = (hook_name(factory), value)
        except BaseException:
            self.post_terminate()
            raise
        env = {k: v for k, (_, v) in merged_env.items()}
        data = {k: v for k, (_, v) in merged_data.items()}
        os.environ.update(env)
        if data:
            self.resource_file = self._entry.with_suffix(".resources")
            self.resource_file.write_text("".join(f"{k}={v}\n" for k, v in sorted(data.items())))
            os.environ[RESOURCE_FILE_ENV] = str(self.resource_file)
        return WorkloadConfig(env_vars=env, resource_data=data)

    def post_create(self) -> None:
        for hook in self.hooks:
            hook.post_create()

    def pre_terminate(self, timeout_s: float) -> bool:
        """Run pre_terminate hooks, giving up after `timeout_s` (they may hang
        on a stuck device); True if they finished."""
        done = threading.Event()

        def run() -> None:
            try:
                for hook in self.hooks:
                    hook.pre_terminate()
            except Exception:
                log.exception("pre_terminate hook failed for %s", self.workload.workload_id)
            finally:
                done.set()

        threading.Thread(target=run, daemon=True, name="ray-accel-pre-terminate").start()
        if not done.wait(timeout_s):
            log.warning("pre_terminate hooks of %s did not finish within %ss", self.workload.workload_id, timeout_s)
            return False
        return True

    @property
    def terminated(self) -> bool:
        """Whether post_terminate has run (it runs once)."""
        return self._terminated

    def post_terminate(self) -> None:
        if self._terminated:
            return
        self._terminated = True
        try:
            for hook in reversed(self.hooks):
                try:
                    hook.post_terminate()
                except Exception:
                    log.exception("post_terminate hook failed for %s", self.workload.workload_id)
        finally:
            self._entry.unlink(missing_ok=True)
            if self.resource_file is not None:
                self.resource_file.unlink(missing_ok=True)
