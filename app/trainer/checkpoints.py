"""Checkpoint folders: written to a temporary sibling, renamed into place, oldest pruned, newest found on resume.

Layout under `trainer.default_local_dir`:
    global_step_<N>/            one complete checkpoint (actor/, critic/, a moving reference's ref/, trainer_state.json)
    latest_checkpointed_iteration.txt   N of the newest complete checkpoint (verl's file name)
A crash while writing leaves only a `.tmp-global_step_<N>-*` folder, which resume ignores and the next save removes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Optional

_STEP_DIR = re.compile(r"^global_step_(\d+)$")
LATEST_FILE = "latest_checkpointed_iteration.txt"
STATE_FILE = "trainer_state.json"


class CheckpointError(ValueError):
    """A resume path does not hold a complete checkpoint; the message names it."""


def step_dir(root: str | os.PathLike, step: int) -> Path:
    return Path(root) / f"global_step_{step}"


def staging_dir(root: str | os.PathLike, step: int, token: str) -> Path:
    """Where all ranks write step `step` before rank 0 renames it; `token` is shared by the ranks (e.g. run id)."""
    return Path(root) / f".tmp-global_step_{step}-{token}"


def publish(
    root: str | os.PathLike, staging: Path, step: int, state: dict[str, Any], max_to_keep: Optional[int]
) -> Path:
    """Rank 0, after every rank finished writing into `staging`: add the trainer state, rename, prune."""
    root = Path(root)
    (staging / STATE_FILE).write_text(json.dumps(state, indent=2, sort_keys=True))
    final = step_dir(root, step)
    if final.exists():  # a re-run of the same step replaces the old copy only once the new one is complete
        old = final.with_name(final.name + ".replaced")
        os.replace(final, old)
        os.replace(staging, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, final)
    tmp_latest = root / (LATEST_FILE + ".tmp")
    tmp_latest.write_text(str(step))
    os.replace(tmp_latest, root / LATEST_FILE)
    _prune(root, max_to_keep)
    for leftover in root.glob(".tmp-global_step_*"):
        shutil.rmtree(leftover, ignore_errors=True)
    return final


def list_checkpoints(root: str | os.PathLike) -> list[tuple[int, Path]]:
    """Complete checkpoints under `root`, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and (child / STATE_FILE).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def find_resume_dir(root: str | os.PathLike, resume_mode: str) -> Optional[Path]:
    """The checkpoint to resume from: newest under `root` (auto), none (disable), or the given path."""
    if resume_mode == "disable":
        return None
    if resume_mode == "auto":
        found = list_checkpoints(root)
        return found[-1][1] if found else None
    path = Path(resume_mode)
    if not (path / STATE_FILE).is_file():
        raise CheckpointError(
            f"trainer.resume_mode={resume_mode!r} is not a complete checkpoint folder (no {STATE_FILE} inside); "
            f"complete ones under {root}: {[str(p) for _, p in list_checkpoints(root)] or 'none'}"
        )
    return path


def read_state(ckpt: Path) -> dict[str, Any]:
    return json.loads((ckpt / STATE_FILE).read_text())


# what resume reads: the trainer state's keys, and per engine folder the index of its sharded state (FSDP's DCP
# `.metadata`, or DeepSpeed's `latest`) and the engine's own state
_STATE_KEYS = ("global_step", "policy_version", "kl_coef", "data")
_ENGINE_INDEXES = (".metadata", "latest")
_ENGINE_STATE = "engine_state.pt"


def check_checkpoint(ckpt: Path) -> None:
    """Refuse, naming the file, a checkpoint that resume could not load: unreadable or incomplete trainer state, or
    an engine folder (actor/, critic/, ref/) missing a file or holding an empty one (a copy cut short, a full disk)."""
    state_file = ckpt / STATE_FILE
    try:
        state = json.loads(state_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(
            f"{state_file} cannot be read as JSON ({err}): the checkpoint {ckpt} is corrupt; "
            "resume from another (trainer.resume_mode=<path>) or delete it"
        ) from err
    missing = [k for k in _STATE_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise CheckpointError(f"{state_file} lacks {missing}: the checkpoint {ckpt} is incomplete")
    if not (ckpt / "actor").is_dir():
        raise CheckpointError(f"{ckpt} has no actor/ folder: the checkpoint is incomplete")
    for engine in ("actor", "critic", "ref"):
        folder = ckpt / engine
        index = next((n for n in _ENGINE_INDEXES if (folder / n).exists()), _ENGINE_INDEXES[0])
        for name in (index, _ENGINE_STATE) if folder.is_dir() else ():
            path = folder / name
            if not path.is_file() or path.stat().st_size == 0:
                raise CheckpointError(
                    f"{path} is {'empty' if path.is_file() else 'missing'}: the checkpoint {ckpt} "
                    "is corrupt; resume from another (trainer.resume_mode=<path>) or delete it"
                )


def _prune(root: Path, max_to_keep: Optional[int]) -> None:
    if not max_to_keep or max_to_keep <= 0:
        return
    for _, path in list_checkpoints(root)[:-max_to_keep]:
        shutil.rmtree(path, ignore_errors=True)
