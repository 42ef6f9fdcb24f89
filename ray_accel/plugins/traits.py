"""What a backend declares about its family's devices, as one frozen value.

The planner, the bridge and the metrics layer need a few facts about a
family that are not in its `Device` values: whether a device may be used by
several processes at once, how to order devices into AUTO_SPLIT blocks,
whether a mask may name devices by opaque ids, whether the backend's
telemetry reads the masks workers publish. The backend declares them
(`DevicePlugin.traits`); they travel as this value (to `plan_partitions`, in
the bridge spec to every worker, in the state record), never as a plugin
object, so the core stays a pure function of values.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from ray_accel.core import reader


class SplitOrder(enum.Enum):
    """How AUTO_SPLIT orders devices before cutting them into equal blocks."""

    # Consecutive device indexes, so each block's core ids are one range
    # aligned to its size (what a family needs whose multi-core jobs want
    # contiguous, aligned cores, and whose links follow the index order).
    INDEX_BLOCKS = "index-blocks"
    # NUMA node and link island first, then index; where a block is not
    # linked within itself, blocks are grown greedily along the links.
    LOCALITY = "locality"


@dataclass(frozen=True)
class DeviceTraits:
    # Several processes (so several raylets) may use one device at once:
    # SHARED mode is allowed, and a request may ask for a fraction of one.
    shareable: bool = False
    split: SplitOrder = SplitOrder.LOCALITY
    # A mask may name devices by opaque ids (not integers): such a mask is
    # handed to Ray token by token, unparsed.
    opaque_ids: bool = False
    # The backend's telemetry attributes devices to processes through the
    # masks workers publish (`ray_accel.core.masks`): only then do workers
    # write them.
    reads_published_masks: bool = False

    @classmethod
    def from_json(cls, row: object) -> DeviceTraits:
        """Traits as `reader.dump` wrote them, every field present; anything
        else is an `InputError` naming the field."""
        node = reader.Cursor(row, "traits")
        for f in dataclasses.fields(cls):
            node.at(f.name)
        return reader.load(cls, row, "traits")
