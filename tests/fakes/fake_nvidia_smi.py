"""A fake `nvidia-smi` for the CUDA repair: a script that records its argv.

What it imitates: `nvidia-smi -r/--gpu-reset` with `-i` naming one GPU (the
nvidia-smi manual: "-r, --gpu-reset: Trigger a reset of one or more GPUs
... Optional -i switch can be used to target one or more specific
devices"), exiting 0 and printing "GPU <bus id> was successfully reset."
and "All done." on success; on failure a non-zero status and the refusal
NVIDIA NVSentinel met with persistence mode on, "In use by another client"
(NVIDIA/NVSentinel#1690). Each run appends its arguments as one JSON line
to the log, so a test counts the runs and reads their arguments.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SUCCESS = "GPU 00000000:07:00.0 was successfully reset.\nAll done."
IN_USE = "The following GPUs could not be reset:\n  GPU 00000000:07:00.0: In use by another client"


def install(where: Path, status: int = 0) -> tuple[Path, Path]:
    """(the script, the log it appends to): a fake nvidia-smi in `where` that exits `status`."""
    log = where / "nvidia-smi.jsonl"
    script = where / "nvidia-smi"
    said = SUCCESS if status == 0 else IN_USE
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"print({said!r})\n"
        f"sys.exit({status})\n"
    )
    script.chmod(0o755)
    return script, log


def runs(log: Path) -> list[list[str]]:
    """The argument lists of every run so far."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]
