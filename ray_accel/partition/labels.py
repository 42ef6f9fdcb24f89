"""The node labels a partition's raylet carries, so work can target it.

`label_selector={PARTITION_LABEL: "p0"}` picks partition p0 on any host;
adding `HOST_LABEL` picks it on one host.
"""

from __future__ import annotations

PARTITION_LABEL = "ray-accel.io/partition"
TYPE_LABEL = "ray-accel.io/accelerator-type"
