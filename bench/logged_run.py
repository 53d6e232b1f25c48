"""A bench's training command, run from the repository root with its output in a log file."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path


def run_logged(cmd: list[str], log: Path, cwd: Path) -> tuple[int, float]:
    """Run ``cmd`` in ``cwd``, stdout and stderr into ``log``; returns its exit code and the wall minutes it took."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with log.open("w") as f:
        code = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT).returncode
    return code, (time.monotonic() - start) / 60
