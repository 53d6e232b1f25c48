"""`dataset_name` + split of the grpo_chat_completion card as a local data file; there is no dataset hub at run time."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from app.pipeline.params import PipelineError

_SUFFIXES = (".jsonl", ".json", ".parquet")


def resolve_split(key: str, split: str, dataset_name: Optional[str], work_dir: Path, dry_run: bool) -> str:
    """The file or `save_to_disk` folder the trainer reads for `split`:
    - `split` is itself a path (the card's JSONL paths): used as it is;
    - `dataset_name` is a local folder: `<folder>/<split>` (a `save_to_disk` folder) or `<folder>/<split>.jsonl|json|
      parquet`;
    - `dataset_name` is a hub id: the split from the local Hugging Face datasets cache (offline), written once to
      `work_dir/data/<split>.jsonl`.
    Anything else is an error naming both keys and where we looked."""
    path = Path(split).expanduser()
    if path.exists():
        return str(path.resolve())
    if not dataset_name:
        raise PipelineError(f"{key}={split!r}: no such file, and no dataset_name to take a split of that name from")
    folder = Path(dataset_name).expanduser()
    if folder.is_dir():
        for candidate in (folder / split, *(folder / f"{split}{s}" for s in _SUFFIXES)):
            if candidate.exists():
                return str(candidate.resolve())
        raise PipelineError(
            f"{key}={split!r}: dataset_name={dataset_name} is a folder without {split}/ or "
            f"{split}{{{','.join(_SUFFIXES)}}}"
        )
    out = work_dir / "data" / f"{split}.jsonl"
    if out.is_file():
        return str(out.resolve())
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # never reach for the network
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import datasets

        # `datasets` reads the variable once, at its import: where something imported it earlier, the hub would be
        # tried (about 20 s of retries without a network) unless its setting is changed too
        datasets.config.HF_HUB_OFFLINE = True
        table = datasets.load_dataset(dataset_name, split=split)
    except Exception as exc:  # not cached, a wrong split name, no datasets package: say which and how to fix
        raise PipelineError(
            f"dataset_name={dataset_name!r}, {key}={split!r}: not a local file or folder, and not in the local Hugging "
            f"Face datasets cache (no network here): {type(exc).__name__}: {str(exc)[:300]}. Copy the data here "
            "and give its JSONL paths as dataset_train_split / dataset_validation_split"
        ) from exc
    if dry_run:  # found in the cache: written when the run starts
        return str(out.resolve())
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_json(str(out), lines=True)
    return str(out.resolve())
