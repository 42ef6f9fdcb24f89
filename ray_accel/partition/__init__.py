"""Splitting a host into partitions (one raylet each), and the labels their raylets carry."""
