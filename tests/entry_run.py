"""Running an entry point (`python -m app.<verb> ...`) as a user would, in a subprocess, and recording how it ended:
exit code, the lines on stderr, the seconds taken, whether `ray.init` was called, and a tag in its environment that
every process it starts inherits (so the Ray processes it left, if any, can be told from other users' clusters)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TAG_ENV = "RAYRL_TEST_RUN_TAG"

# ray.init wrapped to leave a mark, then the module run as `python -m` runs it (so Hydra finds configs/ the same way)
_WRAPPER = """
import os, runpy, sys
import ray
_init = ray.init
def _marked_init(*args, **kwargs):
    with open(os.environ["RAYRL_TEST_RAY_MARK"], "a") as f:
        f.write("ray.init\\n")
    return _init(*args, **kwargs)
ray.init = _marked_init
module = sys.argv[1]
sys.argv = [module] + sys.argv[2:]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


@dataclass
class EntryRun:
    code: int
    stderr_lines: list[str]
    stdout: str
    seconds: float
    ray_init_called: bool
    tag: str

    @property
    def error(self) -> str:
        """The one line on stderr (the test fails when there are more or none)."""
        assert len(self.stderr_lines) == 1, f"expected one line on stderr, got {len(self.stderr_lines)}:\n" + "\n".join(
            self.stderr_lines
        )
        return self.stderr_lines[0]


def run_entry(
    module: str, args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> EntryRun:
    mark = Path(cwd) / f".ray-init-{uuid.uuid4().hex}"
    tag = uuid.uuid4().hex
    full_env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "RAYRL_TEST_RAY_MARK": str(mark),
        TAG_ENV: tag,
        "HF_HUB_OFFLINE": "1",
        **(env or {}),
    }
    for name in ("RAY_ADDRESS", "RAYRL_TRACEBACK"):
        if env is None or name not in env:
            full_env.pop(name, None)
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _WRAPPER, module, *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    seconds = time.monotonic() - start
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return EntryRun(done.returncode, lines, done.stdout, seconds, mark.exists(), tag)


def tagged_ray_processes(tag: str) -> list[tuple[int, str]]:
    """(pid, name) of the raylet / gcs_server processes whose environment carries `tag`: those started, directly or
    not, by the run given that tag, and no one else's."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            name = (entry / "comm").read_text().strip()
            if name not in ("raylet", "gcs_server"):
                continue
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or another user's
            continue
        if f"{TAG_ENV}={tag}".encode() in environ.split(b"\0"):
            found.append((int(entry.name), name))
    return found
