"""Training jobs: every `fit()` of a TorchTrainer with `AcceleratorTorchConfig`,
its phase (derived from Ray Train V2's controller states and the backend's own
events), its replicas, kept in one cluster-wide store any host can read
(`model`: pure; `store`: the store actor and its clients)."""

from ray_accel.jobs.model import (
    PHASES,
    Event,
    JobRecord,
    Phase,
    Replica,
    Transition,
    apply_event,
    mark_lost,
    phase_for_state,
)

__all__ = [
    "PHASES",
    "Event",
    "JobRecord",
    "Phase",
    "Replica",
    "Transition",
    "apply_event",
    "mark_lost",
    "phase_for_state",
]
