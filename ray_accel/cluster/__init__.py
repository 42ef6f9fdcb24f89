"""This host's raylets: start, stop, status, recover; ports, state, auth; `ray_accel.init`."""
