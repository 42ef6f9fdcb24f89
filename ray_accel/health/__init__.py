"""The host's health decider: it polls the active backend's health monitor,
writes `<state dir>/health.json`, and takes a partition whose device went bad
out of scheduling through Ray (drain), restarts it without the device
(shrink) and with it again once it is healthy (return to service).

`rules` is the pure state machine of one partition; `decider` the process
that owns the actions (one per host, started by `ray-accel start` in a
session of its own, recorded in the host record, stopped first by `stop`);
`actions` what it does to raylets (under the host's lock); `driver_ops` the
short-lived Ray drivers it runs for what needs one (metrics exporters);
`requests` the hand-made clears; `view` what the CLI shows.
"""

from ray_accel.cluster import helpers
from ray_accel.cluster.state import DECIDER_KIND, REPARTITION_KIND

# The decider is one of the host's helper processes: `stop` stops it first,
# and every record check knows what it runs.
helpers.register(DECIDER_KIND, "ray_accel.health.decider")
helpers.register(REPARTITION_KIND, "ray_accel.health.repartition")
