"""Finding exactly the processes one test started, however they were started.

Other sessions on the machine run Ray too, so a test never counts raylets by
name. Instead it gives the command it runs an environment variable with a tag
of its own; every process below it inherits the environment (Ray passes
``os.environ`` on to the GCS, raylets and workers: `services.start_ray_process`),
also after it has been re-parented or moved to another process group, so
the processes carrying the tag are exactly the test's.
"""

from __future__ import annotations

import os
import time
import uuid

TAG_ENV = "RAYACCEL_TEST_TAG"


def new_tag() -> dict[str, str]:
    return {TAG_ENV: uuid.uuid4().hex}


def tagged(tag: dict[str, str]) -> dict[int, str]:
    """PID -> name of every live (not zombie) process whose environment holds `tag`."""
    needle = f"{TAG_ENV}={tag[TAG_ENV]}".encode()
    out: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        name, _, rest = stat.partition("(")[2].rpartition(")")
        if rest.split()[:1] == ["Z"]:
            continue
        if needle in environ.split(b"\0"):
            out[int(entry)] = name
    return out


def wait_none_tagged(tag: dict[str, str], timeout_s: float = 15.0) -> dict[int, str]:
    """What is still tagged after `timeout_s` (a dying process may take a moment)."""
    deadline = time.monotonic() + timeout_s
    left = tagged(tag)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = tagged(tag)
    return left
