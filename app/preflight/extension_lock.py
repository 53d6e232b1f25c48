"""A `strategy=deepspeed` run is refused while an interrupted build of a DeepSpeed op left its lock file behind.

DeepSpeed compiles its CPU ops (the shared-memory collectives, the CPU Adam) on first use through PyTorch's
`torch.utils.cpp_extension.load`, which takes a lock file in the op's build folder and removes it when the build ends.
A build killed halfway (Ctrl-C twice, an OOM kill) leaves the file, and every later build of that op waits for it to
go away, silently and forever: the run would hang after Ray started. Only this machine's folder is looked at; the
workers of a multi-node cluster build on their own nodes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Mapping, Optional

from app.config.deepspeed_check import deepspeed_role_paths
from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError

# A DeepSpeed CPU op builds in minutes; a lock this old has no build behind it.
STALE_AFTER_S = 15 * 60


def extensions_root(env: Mapping[str, str] = os.environ, home: Optional[Path] = None) -> Path:
    """Where torch builds extensions: $TORCH_EXTENSIONS_DIR, else the user's cache folder's `torch_extensions`
    (as `torch.utils.cpp_extension` chooses, without importing torch on the driver)."""
    if env.get("TORCH_EXTENSIONS_DIR"):
        return Path(env["TORCH_EXTENSIONS_DIR"])
    cache = env.get("XDG_CACHE_HOME") or str((home or Path.home()) / ".cache")
    return Path(cache) / "torch_extensions"


def stale_locks(root: Path, now: float, stale_after_s: float = STALE_AFTER_S) -> list[tuple[Path, float]]:
    """(lock file, its age in seconds) for every build lock under `root` older than `stale_after_s`, oldest first.
    Builds sit in `<root>/<op>/` under $TORCH_EXTENSIONS_DIR and in `<root>/py311_cpu/<op>/` (Python and accelerator)
    under the default root."""
    found = []
    for pattern in ("*/lock", "*/*/lock"):
        for lock in root.glob(pattern):
            try:
                age = now - lock.stat().st_mtime
            except FileNotFoundError:  # a live build finished between the listing and the stat
                continue
            if age > stale_after_s:
                found.append((lock, age))
    return sorted(found, key=lambda item: -item[1])


def check_extension_locks(cfg: TrainerRunConfig, env: Mapping[str, str] = os.environ) -> None:
    roles = deepspeed_role_paths(cfg)
    if not roles:
        return
    key = f"{roles[0]}.strategy=deepspeed"
    locks = stale_locks(extensions_root(env), time.time())
    if not locks:
        return
    lock, age = locks[0]
    more = f" (and {len(locks) - 1} more)" if len(locks) > 1 else ""
    raise PreflightError(
        f"{key}: {lock}{more} is a build lock left {age / 60:.0f} minutes ago by a build of DeepSpeed's "
        f"'{lock.parent.name}' op that did not finish; PyTorch would wait for it forever and the run would hang. "
        f"Remove {'it' if len(locks) == 1 else 'them'} (rm {' '.join(str(path) for path, _ in locks)}), unless another "
        "job on this machine is building that op right now"
    )
