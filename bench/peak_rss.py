"""`python bench/peak_rss.py [--interval S] -- CMD ...`: run CMD and print the peak memory of it and every process it
starts.

Ray's GCS, raylet, workers, Serve replicas and vLLM's engine processes all descend from the driver of a local
cluster, so the process tree holds the whole job. Two sums are tracked, each at its own peak:
- RSS: every process's resident set, so pages shared between processes (the torch and vLLM libraries each of
  ~15 Python processes maps, Ray's object store that the trainer writes and the replica reads) count once per
  process: an upper bound on what the job needs;
- PSS: each shared page split between the processes that map it, so the sum is the job's real footprint.
The biggest processes are listed at each peak: by RSS at the RSS peak, by PSS at the PSS peak.

Reading every process's smaps costs CPU (at a 0.5 s interval about a third of a core during `make run` on a 2-core
box, which slowed its steps), so the interval defaults to 2 s and the tool prints its own CPU time: a step time
measured under it is not a clean one.
"""

from __future__ import annotations

import subprocess
import sys
import time

import psutil


def tree_memory(root: psutil.Process) -> tuple[int, int, list[tuple[int, int, str]]]:
    """(summed RSS, summed PSS, [(rss, pss, name)]) of `root` and its descendants."""
    rss_total = pss_total = 0
    per_process = []
    for proc in [root, *root.children(recursive=True)]:
        try:
            info = proc.memory_full_info()  # smaps_rollup: RSS and PSS in one read
            name = proc.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        pss = getattr(info, "pss", info.rss)
        rss_total += info.rss
        pss_total += pss
        per_process.append((info.rss, pss, name))
    return rss_total, pss_total, per_process


def by_name(per_process: list[tuple[int, int, str]]) -> list[tuple[str, int, int]]:
    """[(name, count, summed PSS)], largest sum first: Ray's helper processes are many small ones of few names."""
    sums: dict[str, list[int]] = {}
    for _, pss, name in per_process:
        entry = sums.setdefault(name, [0, 0])
        entry[0] += 1
        entry[1] += pss
    return sorted(((name, count, pss) for name, (count, pss) in sums.items()), key=lambda e: (-e[2], e[0]))


def main(argv: list[str]) -> int:
    interval = 2.0
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if "--" in argv:
        options, argv = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
        if options[:1] == ["--interval"] and len(options) == 2:
            interval = float(options[1])
        elif options:
            print(__doc__, file=sys.stderr)
            return 2
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    child = subprocess.Popen(argv)
    root = psutil.Process(child.pid)
    peak_rss = peak_pss = 0
    at_peak: list[tuple[int, int, str]] = []
    at_pss_peak: list[tuple[int, int, str]] = []
    start = time.monotonic()
    while child.poll() is None:
        try:
            rss, pss, per_process = tree_memory(root)
        except psutil.NoSuchProcess:
            break
        if rss > peak_rss:
            peak_rss, at_peak = rss, per_process
        if pss > peak_pss:
            peak_pss, at_pss_peak = pss, per_process
        time.sleep(interval)
    print(
        f"peak RSS of the process tree: {peak_rss / 2**30:.2f} GiB; peak PSS: {peak_pss / 2**30:.2f} GiB; "
        f"over {time.monotonic() - start:.0f} s (exit code {child.returncode})",
        flush=True,
    )
    own = psutil.Process().cpu_times()
    print(f"this tool's own CPU time: {own.user + own.system:.0f} s (sampling every {interval:g} s)", flush=True)
    top = sorted(at_peak, reverse=True)[:8]
    print(
        "largest at the RSS peak (RSS, GiB): " + ", ".join(f"{name} {rss / 2**30:.2f}" for rss, _, name in top),
        flush=True,
    )
    top = sorted(at_pss_peak, key=lambda entry: entry[1], reverse=True)[:10]
    print(
        "largest at the PSS peak (PSS, GiB): "
        + ", ".join(f"{name} {pss / 2**30:.2f}" for _, pss, name in top)
        + f"; {len(at_pss_peak)} processes",
        flush=True,
    )
    print(
        "all at the PSS peak, by name (count x, summed PSS GiB): "
        + ", ".join(f"{name} {count}x {pss / 2**30:.2f}" for name, count, pss in by_name(at_pss_peak)),
        flush=True,
    )
    return child.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
