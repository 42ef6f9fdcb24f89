"""Hooks for the training tests, imported by the training workers."""

from __future__ import annotations

from ray_accel.hooks.config import LifecycleHook, Workload, WorkloadConfig


class SetsEnvHook(LifecycleHook):
    def __init__(self, workload: Workload, name: str, value: str) -> None:
        super().__init__(workload)
        self.name, self.value = name, value

    def pre_create(self) -> WorkloadConfig:
        return WorkloadConfig(env_vars={self.name: self.value})


class SetsEnv:
    """A picklable factory: a hook whose pre_create sets `name` to `value`."""

    def __init__(self, name: str, value: str) -> None:
        self.name, self.value = name, value

    def __call__(self, workload: Workload) -> SetsEnvHook:
        return SetsEnvHook(workload, self.name, self.value)
