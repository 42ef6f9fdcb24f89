"""How Ray takes a count of an accelerator resource: Ray's own words, in one place.

Ray passes its GPU resource as `--num-gpus` (`ray start`) and `num_gpus`
(`ray.init`, tasks, actors), and Ray Train asks for it with
`ScalingConfig(use_gpu=True)`; every other accelerator resource is a custom
resource, given in `--resources` / `resources` (Ray 2.60: `ray start --help`,
the signature of `ray.init`, `ray.train.ScalingConfig`). This is Ray's
vocabulary, not an assumption about a vendor: whichever backend names its
resource "GPU" is counted this way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

RAY_GPU = "GPU"


def is_ray_gpu(resource: str) -> bool:
    """Whether Ray takes `resource` through its GPU options (`num_gpus`, `use_gpu`)."""
    return resource == RAY_GPU


def request_name(resource: str) -> str:
    """How a `ray.init` caller names a request for `resource`, for messages."""
    return "num_gpus" if is_ray_gpu(resource) else f"resources[{resource!r}]"


def requested(resource: str, init_kwargs: Mapping[str, Any]) -> Any:
    """The amount of `resource` that `ray.init(**init_kwargs)` asks for (None: none)."""
    if is_ray_gpu(resource):
        return init_kwargs.get("num_gpus")
    return dict(init_kwargs.get("resources") or {}).get(resource)


def with_count(resource: str, count: int, init_kwargs: dict[str, Any]) -> None:
    """Give `ray.init` `count` of `resource` unless the caller gave an amount."""
    if is_ray_gpu(resource):
        init_kwargs.setdefault("num_gpus", count)
    else:
        init_kwargs["resources"] = {resource: count, **(init_kwargs.get("resources") or {})}


def start_args(resource: str, count: int, others: Mapping[str, float]) -> list[str]:
    """`ray start` flags for `count` of `resource` and the custom resources `others`."""
    resources = dict(others)
    args: list[str] = []
    if is_ray_gpu(resource):
        args += ["--num-gpus", str(count)]
    else:
        resources[resource] = count
    if resources:
        args += ["--resources", json.dumps(resources)]
    return args
