"""A health monitor made of a pure rule and an observation.

Every family's monitor is the same loop: observe the health sources (I/O),
hand the observation and the rule's state to the family's pure `step`, keep
the new state. What differs is the observation and the rule; this class
holds the rest, with the lock that lets `clear` come while a poll runs.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from ray_accel.core.health import HealthReport
from ray_accel.core.health_kept import KeptDevice
from ray_accel.plugins.interface import HealthMonitor

StateT = TypeVar("StateT")
ObsT = TypeVar("ObsT")


@dataclass(frozen=True)
class Rule(Generic[StateT, ObsT]):
    """A family's pure health rule: its four functions on its state."""

    step: Callable[[StateT, ObsT, float], tuple[StateT, HealthReport]]
    clear: Callable[[StateT, str], StateT]
    kept: Callable[[StateT], tuple[KeptDevice, ...]]
    resumed: Callable[[StateT, Sequence[KeptDevice]], StateT]


class RuleMonitor(HealthMonitor, Generic[StateT, ObsT]):
    def __init__(self, rule: Rule[StateT, ObsT], state: StateT, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._rule = rule
        self._state = state
        self._lock = threading.Lock()

    @abstractmethod
    def observe(self) -> ObsT:
        """What the health sources show now (I/O only; the rule decides)."""

    def poll(self) -> HealthReport:
        with self._lock:
            obs = self.observe()
            self._state, report = self._rule.step(self._state, obs, self.clock())
            return report

    def clear(self, device_id: str) -> None:
        with self._lock:
            self._state = self._rule.clear(self._state, device_id)

    def kept(self) -> tuple[KeptDevice, ...]:
        with self._lock:
            return self._rule.kept(self._state)

    def resume(self, kept: Sequence[KeptDevice]) -> None:
        with self._lock:
            self._state = self._rule.resumed(self._state, kept)
