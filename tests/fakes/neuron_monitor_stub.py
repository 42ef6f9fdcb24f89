"""A stub `neuron-monitor`: streams a fixture report, one JSON line per period.

Behaviour modelled on the Neuron docs' neuron-monitor user guide
(aws-neuron/aws-neuron-sdk `tools/neuron-sys-tools/neuron-monitor-user-guide.rst`):
it takes `-c <config file>` whose top-level `"period"` ("5s") sets how often
it writes a complete report to stdout, and runs until killed. The report is
STUB_MONITOR_FIXTURE (a file under tests/fixtures/neuron/neuron-monitor, or a
path), printed compact on one line as the tool streams it (the verbatim
trn1.2xlarge capture in that directory is one such line). STUB_MONITOR_PIDFILE:
where to write this process's pid. STUB_MONITOR_EXIT=1: print once and exit 1.

`system_data.neuron_hw_counters.neuron_devices` is, as the guide documents
it, one object per device: `neuron_device_index`, `mem_ecc_corrected`,
`mem_ecc_uncorrected`, `sram_ecc_corrected`, `sram_ecc_uncorrected` (counts
since the driver loaded; the report carries no schema version).
STUB_MONITOR_DEVICES=N: one such row for each of devices 0..N-1, all zero,
instead of the fixture's. STUB_MONITOR_GROW="<device>:<counter>": that
counter of that device is the number of reports printed before this one
(0, 1, 2, ...): a count that grows, as an uncorrected error does.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
COUNTERS = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected")


def main() -> int:
    args = sys.argv[1:]
    if len(args) != 2 or args[0] not in ("-c", "--config-file"):
        print("stub supports only -c <config>", file=sys.stderr)
        return 2
    period = float(json.loads(Path(args[1]).read_text())["period"].removesuffix("s"))
    name = os.environ.get("STUB_MONITOR_FIXTURE", "trn2.48xlarge-user-guide.json")
    path = Path(name)
    if not path.is_absolute():
        path = HERE.parents[1] / "fixtures" / "neuron" / "neuron-monitor" / name
    report = json.loads(path.read_text())
    system = report.setdefault("system_data", {})
    if os.environ.get("STUB_MONITOR_DEVICES"):
        count = int(os.environ["STUB_MONITOR_DEVICES"])
        rows = [dict.fromkeys(COUNTERS, 0) | {"neuron_device_index": i} for i in range(count)]
        system["neuron_hw_counters"] = {"period": period, "neuron_devices": rows, "error": ""}
    rows = system.get("neuron_hw_counters", {}).get("neuron_devices", [])
    grow = os.environ.get("STUB_MONITOR_GROW")
    device, counter = (int(grow.split(":")[0]), grow.split(":")[1]) if grow else (None, "")
    if os.environ.get("STUB_MONITOR_PIDFILE"):
        Path(os.environ["STUB_MONITOR_PIDFILE"]).write_text(f"{os.getpid()}\n")
    printed = 0
    while True:
        for row in rows:
            if row["neuron_device_index"] == device:
                row[counter] = printed
        sys.stdout.write(json.dumps(report, separators=(",", ":")) + "\n")
        sys.stdout.flush()
        printed += 1
        if os.environ.get("STUB_MONITOR_EXIT"):
            return 1
        time.sleep(period)


if __name__ == "__main__":
    sys.exit(main())
