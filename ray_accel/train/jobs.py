"""Feeding the job store from Ray Train V2's controller.

The seam is Ray Train V2's `ControllerCallback` (a DeveloperAPI,
ray/train/v2/_internal/execution/callback.py:115-181 in Ray 2.60), which runs
inside the controller actor and sees every controller state change
(`ray_accel.train.callback.JobCallback`). A TorchConfig cannot attach one; Ray
Train builds the callbacks named in the driver's `RAY_TRAIN_CALLBACKS`
(comma-separated import paths of classes built with no arguments,
ray/train/v2/_internal/callbacks/env_callback.py:9-39, read at every `fit()`,
api/data_parallel_trainer.py:207). `AcceleratorTorchConfig` adds `JobCallback`
there when it is made, where this Ray has the callback class. The variable is
process-wide, so the callback stays inert for a run whose backend config is
not ours.

The backend's `on_start` (run by Ray Train in the same controller process,
once per attempt, after the workers are placed) sends the replicas.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from typing import Any

from ray_accel.jobs import model, store
from ray_accel.plugins.runtime import Rank
from ray_accel.rayapi import train as rayapi_train
from ray_accel.rayapi.feature import RayApiMissing
from ray_accel.train.worker import WorkerFacts

log = logging.getLogger(__name__)

CALLBACKS_ENV = "RAY_TRAIN_CALLBACKS"
CALLBACK_PATH = "ray_accel.train.callback.JobCallback"


def register_callback(environ: Any = None) -> None:
    """Name `JobCallback` in this process's `RAY_TRAIN_CALLBACKS` (once);
    where this Ray has no `ControllerCallback`, say that runs are not
    tracked as jobs and name nothing (Ray Train would fail to import it)."""
    try:
        rayapi_train.controller_callback_base()
    except RayApiMissing as e:
        log.warning("ray-accel: %s; fit() runs are not recorded as jobs (`ray-accel jobs`)", e)
        return
    env = os.environ if environ is None else environ
    names = [n.strip() for n in env.get(CALLBACKS_ENV, "").split(",") if n.strip()]
    if CALLBACK_PATH not in names:
        env[CALLBACKS_ENV] = ",".join([*names, CALLBACK_PATH])


def allowed_workers(num_workers: Any) -> tuple[int, int]:
    """(min, max) from `ScalingConfig.num_workers`: an int, or (min, max) when elastic."""
    if isinstance(num_workers, tuple | list) and len(num_workers) == 2:
        return int(num_workers[0]), int(num_workers[1])
    return int(num_workers), int(num_workers)


def on_start(run_id: str, ranks: Sequence[Rank], facts: Sequence[WorkerFacts], collective: str, reason: str) -> None:
    """A new attempt: its replicas (one per worker, world-rank order), its
    collective and why "auto" chose it."""
    replicas = tuple(
        model.Replica(
            **dataclasses.asdict(r), host=f.host, partition=f.partition, node_id=f.node_id, devices=f.own_ids, pid=f.pid
        )
        for r, f in zip(ranks, facts, strict=True)
    )
    store.send(model.STARTING, run_id, model.Started(replicas, collective, reason))
