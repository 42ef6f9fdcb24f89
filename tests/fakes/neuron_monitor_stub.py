"""A stub `neuron-monitor`: streams a fixture report, one JSON line per period.

Behaviour modelled on the Neuron docs' neuron-monitor user guide
(aws-neuron/aws-neuron-sdk `tools/neuron-sys-tools/neuron-monitor-user-guide.rst`):
it takes `-c <config file>` whose top-level `"period"` ("5s") sets how often
it writes a complete report to stdout, and runs until killed. The report is
STUB_MONITOR_FIXTURE (a file under tests/fixtures/neuron/neuron-monitor, or a
path), printed compact on one line as the tool streams it (the verbatim
trn1.2xlarge capture in that directory is one such line). STUB_MONITOR_PIDFILE:
where to write this process's pid. STUB_MONITOR_EXIT=1: print once and exit 1.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()


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
    line = json.dumps(json.loads(path.read_text()), separators=(",", ":")) + "\n"
    if os.environ.get("STUB_MONITOR_PIDFILE"):
        Path(os.environ["STUB_MONITOR_PIDFILE"]).write_text(f"{os.getpid()}\n")
    while True:
        sys.stdout.write(line)
        sys.stdout.flush()
        if os.environ.get("STUB_MONITOR_EXIT"):
            return 1
        time.sleep(period)


if __name__ == "__main__":
    sys.exit(main())
