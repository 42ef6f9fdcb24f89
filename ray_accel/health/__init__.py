"""The host's health decider: it polls the active backend's health monitor,
writes `<state dir>/health.json`, and takes a partition whose device went bad
out of scheduling through Ray (drain), restarts it without the device
(shrink) and with it again once it is healthy (return to service).

`rules` is the pure state machine of one partition; `decider` the process
that owns the actions (one per host, started by `ray-accel start` in a
session of its own, recorded in the host record, stopped first by `stop`);
what it does to raylets lives in `ray_accel.hostops` (under the host's lock);
`requests` the hand-made clears; `view` what the CLI shows.
"""
