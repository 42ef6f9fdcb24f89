"""The one seam to Ray's private API (`ray._private`, `ray._raylet`,
`ray.train.v2._internal`, Ray's `Node`): every use is found here by feature
and, where missing, raises `RayApiMissing` naming the running Ray version and
what is missing. Nothing else in ray_accel reaches past Ray's public API
(`tests/unit/test_ray_private_api.py` checks every import)."""
