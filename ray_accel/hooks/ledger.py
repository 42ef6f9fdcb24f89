"""The crash ledger: every `pre_create` gets exactly one `post_terminate`.

Before a workload's first hook runs, an entry (a small JSON file on the
host's local disk) records the workload, its process (PID and kernel start
time), its host and the hooks that run for it. The entry goes away after
`post_terminate`. A worker that dies in between leaves it behind; the next
worker of the same run on the same host finds it, sees the process gone,
claims it atomically (a rename) and runs the missing `post_terminate` of
exactly the hooks that made the entry. Entries of other hosts (a shared hook
directory) are never judged here: a PID means nothing on another machine. A
host is its name and node IP (`ray_accel.core.hosts`), so two hosts that share
a name never judge each other's entries.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray_accel.core import reader
from ray_accel.core.files import write_atomic
from ray_accel.core.hosts import HostId, this_host_name
from ray_accel.core.processes import ProcessRecord
from ray_accel.hooks.config import LifecycleHook, Workload

log = logging.getLogger(__name__)

HOOK_DIR_ENV = "RAYACCEL_HOOK_DIR"

HookFactory = Callable[[Workload], LifecycleHook]


def _target(factory: HookFactory) -> Any:
    # A class or function names itself; a factory object (a configured
    # instance with __call__) is named by its class.
    return factory if hasattr(factory, "__qualname__") else type(factory)


def hook_name(factory: HookFactory) -> str:
    """A hook's name in messages: its class (or function) name."""
    return str(_target(factory).__qualname__)


def hook_id(factory: HookFactory) -> str:
    """A hook's stable identity in the ledger: its qualified name with its module."""
    target = _target(factory)
    return f"{target.__module__}.{target.__qualname__}"


def ledger_dir(run_id: str) -> Path:
    root = Path(os.environ.get(HOOK_DIR_ENV) or Path(tempfile.gettempdir()) / "ray-accel-hooks")
    path = root / _safe(run_id)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:200]


@dataclass(frozen=True)
class LedgerEntry:
    """One ledger file, as `reader.dump` writes it; the process is [pid, start]."""

    workload: Workload
    process: tuple[int, int]
    host: str
    hooks: tuple[str, ...]


def this_host() -> str:
    """This worker's host key: its name and its node's IP."""
    import ray

    return HostId(this_host_name(), ray.util.get_node_ip_address()).key


def entry_path(run_id: str, workload_id: str) -> Path:
    return ledger_dir(run_id) / f"{_safe(workload_id)}.json"


def open_entry(run_id: str, workload: Workload, factories: Sequence[HookFactory]) -> Path:
    """Record that `workload`'s hooks are about to run in this process."""
    me = ProcessRecord.of()
    if me is None:
        raise RuntimeError("cannot read this process's own /proc entry")
    entry = LedgerEntry(workload, (me.pid, me.start_ticks), this_host(), tuple(hook_id(f) for f in factories))
    path = entry_path(run_id, workload.workload_id)
    write_atomic(path, json.dumps(reader.dump(entry)))
    return path


def reconcile(run_id: str, factories: Sequence[HookFactory]) -> list[str]:
    """Run the missing post_terminate of this host's workloads whose process died
    and whose entry these same hooks made. Returns the reconciled workload ids."""
    names = tuple(hook_id(f) for f in factories)
    host = this_host()
    done = []
    for path in sorted(ledger_dir(run_id).glob("*.json")):
        try:
            entry = reader.load(LedgerEntry, json.loads(path.read_text()))
        except (OSError, ValueError):
            log.warning("ray-accel: unreadable hook ledger entry %s left alone", path)
            continue
        if entry.host != host or entry.hooks != names or ProcessRecord(*entry.process).alive():
            continue
        claimed = path.with_suffix(f".claimed.{os.getpid()}")
        try:
            os.rename(path, claimed)
        except OSError:
            continue  # another worker claimed it
        for factory in reversed(list(factories)):
            try:
                factory(entry.workload).post_terminate()
            except Exception:
                log.exception("post_terminate hook failed while reconciling %s", entry.workload.workload_id)
        claimed.unlink(missing_ok=True)
        path.with_suffix(".resources").unlink(missing_ok=True)
        done.append(entry.workload.workload_id)
    return done
