"""Per-step metrics computed from the batch (verl's names), reduced over the data-parallel ranks by the caller."""
from __future__ import annotations

import torch

from app.batch import TensorBatch


def batch_metrics(batch: TensorBatch, response_length_limit: int) -> dict[str, float]:
    """Reward, advantage, length and rollout-match statistics of this rank's samples.

    `response_length/clip_ratio` is the share of responses that hit the length limit (they were cut, not finished).
    `actor/rollout_logprob_diff` is the mean |actor − vLLM| log-prob over response tokens: how far the rollout engine's
    numbers are from the trainer's on the same tokens (bf16 kernels, sampling processors).
    """
    mask = batch["response_mask"].bool()
    lengths = mask.sum(dim=1).float()
    tokens = mask.sum().clamp(min=1)
    out = {
        "critic/score/mean": float(batch["token_level_scores"].sum(dim=1).mean()),
        "critic/rewards/mean": float(batch["token_level_rewards"].sum(dim=1).mean()),
        "critic/advantages/mean": float((batch["advantages"] * mask).sum() / tokens),
        "critic/returns/mean": float((batch["returns"] * mask).sum() / tokens),
        "response_length/mean": float(lengths.mean()),
        "response_length/clip_ratio": float((lengths >= response_length_limit).float().mean()),
        # the prompt columns only: a multi-turn row's tool results are in the response, outside its mask
        "prompt_length/mean": float(batch["attention_mask"][:, :-mask.shape[1]].sum(dim=1).float().mean()),
    }
    if "old_log_probs" in batch and "rollout_log_probs" in batch:
        diff = (batch["old_log_probs"] - batch["rollout_log_probs"]).abs()
        out["actor/rollout_logprob_diff"] = float((diff * mask).sum() / tokens)
    if "values" in batch:
        out["critic/values/mean"] = float((batch["values"] * mask).sum() / tokens)
    return out


def max_min_metrics(batch: TensorBatch) -> dict[str, torch.Tensor]:
    """Quantities whose global max/min (not mean) over ranks is wanted."""
    lengths = batch["response_mask"].sum(dim=1).float()
    scores = batch["token_level_scores"].sum(dim=1)
    return {
        "response_length/max": lengths.max(),
        "critic/score/max": scores.max(),
        "-critic/score/min": -scores.min(),  # negated so one max-reduce serves both
    }
