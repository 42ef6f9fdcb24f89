"""Reading a cluster's metrics as Prometheus serves them, and `top` as its
`--json` prints it: the samples of ray-accel's series on one raylet's
endpoint or on every raylet of a cluster."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

from tests.clusters import Cluster

SAMPLE = re.compile(r"^(\w+)\{(.*)\}\s+(\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(port: int) -> list[tuple[str, dict[str, str], float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = []
    for line in text.splitlines():
        m = SAMPLE.match(line)
        # As served: Ray's recorder puts `ray_` before our `accel_*` names.
        if m and m.group(1).startswith("ray_accel_"):
            out.append((m.group(1), dict(LABEL.findall(m.group(2))), float(m.group(3))))
    return out


def scrape_all(cluster: Cluster) -> list[tuple[str, dict[str, str], float]]:
    """Every raylet's metrics endpoint: the partitions' and the head raylet's (the job store's gauge)."""
    state = json.loads((Path(cluster.env["RAYACCEL_STATE_DIR"]) / "host.json").read_text())
    raylets = [*state["partitions"], *([state["head_raylet"]] if state.get("head_raylet") else [])]
    return [s for p in raylets for s in scrape(p["ports"]["named"]["metrics_export_port"])]


def top(cluster: Cluster) -> dict[str, Any]:
    proc = cluster.cli("top", "--once", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result
