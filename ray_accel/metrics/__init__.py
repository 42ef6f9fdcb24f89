"""Samples per device, partition, workload and process, exported into Ray's metrics."""
