"""Reclaim the shared memory a killed replica's engine leaves behind in /dev/shm.

vLLM's engine processes talk through shared-memory ring buffers (~400 MiB per engine on CPU; a replica with one CPU
worker runs vLLM in its own process and has none, serve.vllm_engine.engine_build_env). A graceful shutdown
unlinks them; a replica that is killed (OOM, `ray.kill`, node trouble) cannot, and /dev/shm is RAM. So each replica
records the /dev/shm names its engine processes map, in its own scratch folder (named with its pid), and every
replica that starts on the node reaps the folders of dead pids: it unlinks the recorded names that no live process
still maps, then the folder. Only names a replica of ours recorded are ever touched.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from serve.payload import SHM_ROOT

RECORD = "engine-shm-segments.txt"
PREFIX = "rayrl-rollout-"


def _mapped_shm(pid: int, root: str = SHM_ROOT) -> set[str]:
    """Names of files directly under `root` mapped by process `pid` (empty when it is gone or unreadable)."""
    names = set()
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                parts = line.rstrip("\n").split(maxsplit=5)  # address perms offset dev inode [path]
                path = parts[5] if len(parts) == 6 else ""
                if path.startswith(root + "/"):
                    names.add(path[len(root) + 1 :].split("/")[0].removesuffix(" (deleted)"))
    except OSError:
        pass
    return names


def _descendants(pid: int) -> list[int]:
    import psutil

    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def record_engine_segments(stage_root: Path) -> list[str]:
    """Write down the /dev/shm names mapped by this process's children (the engine processes)."""
    mapped = set().union(*(_mapped_shm(pid) for pid in _descendants(os.getpid()))) - {stage_root.name}
    names = sorted(n for n in mapped if Path(SHM_ROOT, n).exists())  # skip names already unlinked
    (stage_root / RECORD).write_text("\n".join(names))
    return names


def reap_dead_replicas(root: str = SHM_ROOT) -> list[str]:
    """Unlink what replicas with dead pids recorded, if no live process maps it; returns the folders removed."""
    import psutil

    removed = []
    in_use = None
    for folder in Path(root).glob(PREFIX + "*"):
        try:
            pid = int(folder.name.rsplit("-", 1)[1])
        except (IndexError, ValueError):
            continue
        if psutil.pid_exists(pid):
            continue
        if in_use is None:  # every live process's mappings, read once
            in_use = set().union(*(_mapped_shm(p, str(root)) for p in psutil.pids()))
        record = folder / RECORD
        names = record.read_text().split() if record.is_file() else []
        pending = [n for n in names if n in in_use]
        for name in names:
            if name not in in_use:
                Path(root, name).unlink(missing_ok=True)
        if pending:  # an orphaned engine process still holds them; a later replica retries
            record.write_text("\n".join(pending))
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder.name)
    return removed
