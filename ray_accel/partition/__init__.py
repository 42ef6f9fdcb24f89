"""Splitting a host into partitions (one raylet each), their labels, and allocation within one."""
