"""Rewards on the trainer side: the batch reward manager (rule or custom functions in worker processes) and a
reward-model scorer. Names are imported on first use so that reward worker processes, which import this package,
do not pay for torch and transformers."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "RewardFnSpec": "app.rewards.custom",
    "RewardConfigError": "app.rewards.custom",
    "load_reward_fn": "app.rewards.custom",
    "RewardManager": "app.rewards.manager",
    "RewardResult": "app.rewards.manager",
    "RewardComputeError": "app.rewards.manager",
    "decode_responses": "app.rewards.manager",
    "split_score": "app.rewards.manager",
    "RewardModelScorer": "app.rewards.reward_model",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'app.rewards' has no attribute {name!r}")
