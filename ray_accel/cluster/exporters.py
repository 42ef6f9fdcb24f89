"""The partitions' metrics exporters (`ray_accel.metrics.export`), deployed
once raylets are up: by `start`, `start --recover` and the restarts of the
host's helpers. Metrics are secondary: a failure is reported, never fatal."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ray_accel.cluster import statedir
from ray_accel.cluster.record import HostRecord, PartitionEntry
from ray_accel.metrics.export import Deployment, ExporterEntry
from ray_accel.rayapi.gcs import Progress


def host_level_partition(record: HostRecord) -> str | None:
    """The partition whose exporter also exports the host's own values: the
    first whose exporter runs (`export.host_level_of` reads it so from `health.json`)."""
    return next((p.name for p in record.partitions if p.health.state.exporting), None)


def deployment(record: HostRecord, parts: Sequence[PartitionEntry]) -> Deployment:
    """The exporters of `parts`, each told the devices its raylet serves; the
    host's own values to `host_level_partition`."""
    entries = tuple(ExporterEntry(p.name, p.node_id, p.serving.device_ids) for p in parts if p.node_id)
    return Deployment(
        record.gcs_address, entries, host_level_partition(record), str(statedir.place_of(record).directory)
    )


def deploy(record: HostRecord, parts: Sequence[PartitionEntry], progress: Progress) -> HostRecord:
    """The exporters of `parts` started; the record saved saying whether they run."""
    from ray_accel.metrics import export as exporter

    try:
        names = exporter.deploy(deployment(record, parts))
        progress(f"metrics exporters: {', '.join(names)}")
        record = replace(record, metrics=True)
    except Exception as e:
        progress(f"warning: metrics exporters not started: {type(e).__name__}: {e}")
        record = replace(record, metrics=False)
    return statedir.save(record)
