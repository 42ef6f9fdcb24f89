"""The mock's check child: `python -m ray_accel_mock.check OUTCOME DELAY_S DETAIL`.

Run by `MockPlugin.check` through `ray_accel.plugins.check_runner`, as a
family's check runs (one device visible, a time limit); its body takes
`DELAY_S` seconds and reports what the fault file's `checks` say, so a
time limit shorter than the delay ends it as a real slow check ends.
"""

from __future__ import annotations

import sys
import time

from ray_accel.core.checks import CheckOutcome
from ray_accel.plugins.check_runner import run_body


def mock_check(outcome: str, delay_s: str, detail: str) -> tuple[CheckOutcome, str]:
    time.sleep(float(delay_s))
    return CheckOutcome(outcome), detail


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m ray_accel_mock.check OUTCOME DELAY_S DETAIL", file=sys.stderr)
        return 2
    return run_body(lambda: mock_check(*argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
