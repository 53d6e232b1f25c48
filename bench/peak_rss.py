"""`python bench/peak_rss.py -- CMD ...`: run CMD and print the peak total RSS of it and every process it starts.

Ray's GCS, raylet, workers, Serve replicas and vLLM's engine processes all descend from the driver of a local
cluster, so the process tree holds the whole job. Shared pages are counted once per process (RSS), so the figure is
an upper bound on what the job really needs.
"""
from __future__ import annotations

import subprocess
import sys
import time

import psutil


def tree_rss(root: psutil.Process) -> int:
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def main(argv: list[str]) -> int:
    if "--" in argv:
        argv = argv[argv.index("--") + 1:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    child = subprocess.Popen(argv)
    root = psutil.Process(child.pid)
    peak, start = 0, time.monotonic()
    while child.poll() is None:
        try:
            peak = max(peak, tree_rss(root))
        except psutil.NoSuchProcess:
            break
        time.sleep(0.5)
    print(f"peak RSS of the process tree: {peak / 2**30:.2f} GiB over {time.monotonic() - start:.0f} s "
          f"(exit code {child.returncode})", flush=True)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
