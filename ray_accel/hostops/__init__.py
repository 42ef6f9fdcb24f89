"""Host operations: every change of a running host's raylets beside `start`,
each a transaction written to the host record step by step before the step is
taken (`steps`): a repartition (`repartition`, run by a host helper process),
the drain, stop and restart of one partition that the health decider asks
for (`actions`), finishing a change a crash interrupted and restarting dead
partitions (`recover`, `ray-accel start --recover`), and the short-lived Ray
drivers a change needs (`driver_ops`)."""
