"""A stub `neuron-ls`: prints the inventory of a preset as the tool's JSON does.

Behaviour from the environment: STUB_PRESET (default trn1.32xlarge) and
STUB_MODE: ok | fail | hang | hang-tree | invalid | old | short-bdf.
``hang-tree`` starts a child that sleeps (its pid written to STUB_PIDFILE)
and then hangs itself, as a tool stuck with a helper process would.
STUB_FIXTURE (a file name under tests/fixtures/neuron/neuron-ls, or a path):
print that fixture byte for byte instead; the fixtures come from published
neuron-ls output and are catalogued in tests/fixtures/neuron/CATALOGUE.md.
Preset inventories print trn2 as the real tool does (Neuron docs
neuron-ls.rst, 2.22 onwards): ``nc_count`` in logical cores (4) with
``logical_neuroncore_config`` 2, never the 8 physical cores; Trainium3
presets the same way, by analogy (no Trainium3 output is published).

STUB_ACCEPTS: which output flag the tool takes, as a tool of Neuron 2.33 or
older (``old``, the default: ``--json-output``/``-j`` only), of 2.34 onwards
(``new``: ``--output-format json`` only, the announcement
announce-intent-eos-neuron-ls-json), or ``both``. Any other flag exits 2
with a usage line on stderr. With ``--output-format json`` a preset is
printed in the ASSUMED new format: an object with top-level instance fields
and an UltraServer object beside the device list (the announcement says only
that such top-level fields are added; their names here are placeholders).
STUB_CALLS: a file that gets one line per run, the flags it was given.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def inventory(preset: str, mode: str) -> list[dict[str, object]]:
    sys.path.insert(0, str(HERE.parents[2]))
    from ray_accel_mock.spec import load_spec

    out: list[dict[str, object]] = []
    for d in load_spec(preset).devices:
        lnc = int(d.attributes["logical_core_size"])
        entry: dict[str, object] = {
            "neuron_device": d.index,
            "bdf": f"{0x10 + d.index:02x}:1e.0" if mode == "short-bdf" else f"0000:{0x10 + d.index:02x}:1e.0",
            "cpu_affinity": "0-47",
            "numa_node": str(d.numa_node) if mode != "numa-minus-one" else "-1",
            "connected_to": [int(p.removeprefix("neuron:")) for p in d.peers] or None,
            "nc_count": len(d.core_ids),
            "memory_size": d.memory_bytes,
            "neuroncore_ids": list(d.core_ids),
            "neuron_processes": [{"pid": 4242, "command": "python train.py"}] if d.index == 0 else [],
        }
        if lnc > 1:  # "only available on trn2 instances" (neuron-ls.rst)
            entry["logical_neuroncore_config"] = lnc
        if mode == "old":
            for key in ("numa_node", "cpu_affinity", "neuroncore_ids", "memory_size", "neuron_processes"):
                entry.pop(key)
        out.append(entry)
    return out


OLD = ["--json-output"]
OLD_SHORT = ["-j"]
NEW = ["--output-format", "json"]


def new_format(preset: str, devices: list[dict[str, object]]) -> dict[str, object]:
    """The ASSUMED `--output-format json` envelope around the devices."""
    sys.path.insert(0, str(HERE.parents[2]))
    from ray_accel_mock.spec import load_spec

    spec = load_spec(preset)
    out: dict[str, object] = {"instance_type": spec.instance_type, "instance_id": "i-aabbccdd123456789"}
    lncs = {int(d.attributes["logical_core_size"]) for d in spec.devices}
    if lncs != {1}:
        out["logical_neuroncore_config"] = lncs.pop()
    out["ultraserver"] = {"mode": None, "server_id": None}
    out["neuron_devices"] = [{k: v for k, v in d.items() if k != "logical_neuroncore_config"} for d in devices]
    return out


def main() -> int:
    args = sys.argv[1:]
    calls = os.environ.get("STUB_CALLS")
    if calls:
        with open(calls, "a") as f:
            f.write(" ".join(args) + "\n")
    accepts = os.environ.get("STUB_ACCEPTS", "old")
    allowed = {"old": [OLD, OLD_SHORT], "new": [NEW], "both": [OLD, OLD_SHORT, NEW]}[accepts]
    if args not in allowed:
        print(f"neuron-ls: error: unrecognized arguments: {' '.join(args)}", file=sys.stderr)
        return 2
    fixture = os.environ.get("STUB_FIXTURE")
    if fixture:
        path = Path(fixture)
        if not path.is_absolute() and not path.exists():
            path = HERE.parents[1] / "fixtures" / "neuron" / "neuron-ls" / fixture
        sys.stdout.write(path.read_text())
        return 0
    mode = os.environ.get("STUB_MODE", "ok")
    if mode == "fail":
        print("2026-Nov-22 10:00:00.000 1234:1234 ERROR  TDRV:tdrv_init  Failed to open /dev/neuron0", file=sys.stderr)
        print("2026-Nov-22 10:00:00.001 1234:1234 FATAL  NRT:nrt_init  Neuron driver is not loaded", file=sys.stderr)
        return 1
    if mode == "hang":
        time.sleep(60)
    if mode == "hang-tree":
        child = subprocess.Popen(["sleep", "60"])
        Path(os.environ["STUB_PIDFILE"]).write_text(f"{child.pid}\n")
        time.sleep(60)
    if mode == "invalid":
        print('[{"neuron_device": 0, "nc_count": ')
        return 0
    preset = os.environ.get("STUB_PRESET", "trn1.32xlarge")
    devices = inventory(preset, mode)
    print(json.dumps(new_format(preset, devices) if args == NEW else devices))
    return 0


if __name__ == "__main__":
    sys.exit(main())
