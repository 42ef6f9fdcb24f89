"""Running lifecycle hooks around one workload, with a ledger for crashes.

Every `pre_create` is matched by exactly one `post_terminate`. A worker that
dies in between leaves its ledger entry behind (a small JSON file on the
node's local disk); the next worker of the same run on that node finds the
entry, sees that its process is gone, claims it atomically and runs the
missing `post_terminate`. Hooks are stateless: they get the `Workload` back
from the entry.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import psutil

from ray_accel.hooks import RESOURCE_FILE_ENV, LifecycleHook, Workload, WorkloadConfig, WorkloadDenied, WorkloadRetry

log = logging.getLogger(__name__)

HOOK_DIR_ENV = "RAYACCEL_HOOK_DIR"

HookFactory = Callable[[Workload], LifecycleHook]


def hook_name(factory: HookFactory) -> str:
    return getattr(factory, "__qualname__", None) or type(factory).__name__


def ledger_dir(run_id: str) -> Path:
    root = Path(os.environ.get(HOOK_DIR_ENV) or Path(tempfile.gettempdir()) / "ray-accel-hooks")
    path = root / run_id
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def _safe(workload_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in workload_id)


class HookRun:
    """The hooks of one workload in this process, in order."""

    def __init__(self, run_id: str, workload: Workload, factories: Sequence[HookFactory]) -> None:
        self.run_id = run_id
        self.workload = workload
        self.factories = list(factories)
        self.hooks = [f(workload) for f in self.factories]
        self._entry = ledger_dir(run_id) / f"{_safe(workload.workload_id)}.json"
        self.resource_file: Path | None = None
        self._terminated = False

    def pre_create(self) -> WorkloadConfig:
        """Run every pre_create; apply their env vars and resource data here.

        A denial or a retry request still gets its post_terminate, so the
        counts always match.
        """
        proc = psutil.Process()
        self._entry.write_text(
            json.dumps({"workload": asdict(self.workload), "pid": proc.pid, "create_time": proc.create_time()})
        )
        merged_env: dict[str, str] = {}
        merged_data: dict[str, str] = {}
        try:
            for factory, hook in zip(self.factories, self.hooks, strict=True):
                try:
                    config = hook.pre_create()
                except WorkloadDenied as e:
                    raise WorkloadDenied(
                        f"hook {hook_name(factory)} denied workload {self.workload.workload_id}: {e}"
                    ) from e
                except WorkloadRetry as e:
                    raise WorkloadRetry(
                        f"hook {hook_name(factory)} asked to retry {self.workload.workload_id}: {e}"
                    ) from e
                if not isinstance(config, WorkloadConfig):
                    raise TypeError(f"hook {hook_name(factory)}.pre_create returned {type(config).__name__}")
                merged_env.update(config.env_vars)
                merged_data.update(config.resource_data)
        except BaseException:
            self.post_terminate()
            raise
        os.environ.update(merged_env)
        if merged_data:
            self.resource_file = self._entry.with_suffix(".resources")
            self.resource_file.write_text("".join(f"{k}={v}\n" for k, v in sorted(merged_data.items())))
            os.environ[RESOURCE_FILE_ENV] = str(self.resource_file)
        return WorkloadConfig(env_vars=merged_env, resource_data=merged_data)

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


def _dead(entry: dict[str, object]) -> bool:
    try:
        proc = psutil.Process(int(str(entry["pid"])))
        stale = abs(proc.create_time() - float(str(entry["create_time"]))) > 0.5
        return bool(stale or proc.status() == psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return True


def reconcile(run_id: str, factories: Sequence[HookFactory]) -> list[str]:
    """Run the missing post_terminate of workloads whose process died.

    Returns the reconciled workload ids. Each orphan is claimed by renaming
    its entry, so two workers reconciling at once never both run it.
    """
    done = []
    for path in sorted(ledger_dir(run_id).glob("*.json")):
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not _dead(entry):
            continue
        claimed = path.with_suffix(f".claimed.{os.getpid()}")
        try:
            os.rename(path, claimed)
        except OSError:
            continue  # another worker claimed it
        w = dict(entry["workload"])
        workload = Workload(
            workload_id=w["workload_id"],
            agent_id=w["agent_id"],
            visible_ids=tuple(w.get("visible_ids", ())),
            pid=w.get("pid"),
            labels=w.get("labels", {}),
        )
        for factory in reversed(list(factories)):
            try:
                factory(workload).post_terminate()
            except Exception:
                log.exception("post_terminate hook failed while reconciling %s", workload.workload_id)
        claimed.unlink(missing_ok=True)
        path.with_suffix(".resources").unlink(missing_ok=True)
        done.append(workload.workload_id)
    return done
