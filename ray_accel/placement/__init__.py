"""Placement of training workers onto partitions: policies over a free model
of every partition (`model`, `policies`: pure), the live model read from Ray
(`live`), and the `ScalingConfig` that carries a placement (`scaling`)."""

from ray_accel.placement.live import LiveView, read_view, view_from_nodes
from ray_accel.placement.model import Assignment, FreePartition, Job, Placement, PlacementError, Slot
from ray_accel.placement.policies import POLICIES, Pack, Policy, Spread, Topology, get_policy
from ray_accel.placement.scaling import new_job, place, scaling_config, scaling_configs, to_scaling_config

__all__ = [
    "POLICIES",
    "Assignment",
    "FreePartition",
    "Job",
    "LiveView",
    "Pack",
    "Placement",
    "PlacementError",
    "Policy",
    "Slot",
    "Spread",
    "Topology",
    "get_policy",
    "new_job",
    "place",
    "read_view",
    "scaling_config",
    "scaling_configs",
    "to_scaling_config",
    "view_from_nodes",
]
