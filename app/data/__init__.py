"""Datasets for RL: reading prompt files, templating and tokenizing them, and resumable left-padded batches.

Names are imported on first use, so that ``python -m app.prepare`` (which needs none of the torch parts) starts fast.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DataError": "app.data.errors",
    "PromptBatch": "app.data.collate",
    "collate_prompts": "app.data.collate",
    "PromptDataset": "app.data.dataset",
    "PromptRecord": "app.data.dataset",
    "load_prompt_dataset": "app.data.dataset",
    "check_data_files": "app.data.dataset",
    "PromptDataLoader": "app.data.loader",
    "pad_token_id_of": "app.data.loader",
    "PromptDataOptions": "app.data.options",
    "TRUNCATION_MODES": "app.data.options",
    "ResumableBatchSampler": "app.data.sampler",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'app.data' has no attribute {name!r}")
