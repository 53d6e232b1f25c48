"""PF-PPO (policy filtration, Zhang et al. 2024; verl's `algorithm.use_pf_ppo`): after the advantages are computed,
the batch is resampled with replacement, each sample drawn with a weight of its reward, so that the update sees more
of the samples whose rewards a noisy reward model is likelier to have right (the highest, or the two ends).

Weights of a sample's summed reward `s` over the batch, by `reweight_method`:

    pow:         |s| ** weight_pow
    max_min:     1 where s is the batch's highest or lowest, else 0
    max_random:  0.4 where s is the batch's highest, else 0.1

Every weight gets 1e-8 added (verl's floor), so a batch whose weights are all 0 is still drawn from, uniformly.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

WEIGHT_FLOOR = 1e-8


def _pow(scores: torch.Tensor, weight_pow: float) -> torch.Tensor:
    return scores.abs().pow(weight_pow)


def _max_min(scores: torch.Tensor, weight_pow: float) -> torch.Tensor:
    return ((scores == scores.max()) | (scores == scores.min())).to(scores.dtype)


def _max_random(scores: torch.Tensor, weight_pow: float) -> torch.Tensor:
    return torch.where(scores == scores.max(), 0.4, 0.1).to(scores.dtype)


REWEIGHT_METHODS: dict[str, Callable[[torch.Tensor, float], torch.Tensor]] = {
    "pow": _pow,
    "max_min": _max_min,
    "max_random": _max_random,
}


def filtration_weights(scores: torch.Tensor, reweight_method: str, weight_pow: float) -> torch.Tensor:
    """``(batch,)`` sampling weights (unnormalised, > 0) of ``(batch,)`` summed rewards."""
    if reweight_method not in REWEIGHT_METHODS:
        raise ValueError(f"reweight_method must be one of {sorted(REWEIGHT_METHODS)}, got {reweight_method!r}")
    scores = scores.detach().to(torch.float64).reshape(-1)
    return (REWEIGHT_METHODS[reweight_method](scores, weight_pow) + WEIGHT_FLOOR).clamp(min=WEIGHT_FLOOR)


def filtration_sample(
    scores: torch.Tensor,
    reweight_method: str,
    weight_pow: float,
    generator: Optional[torch.Generator] = None,
) -> torch.Tensor:
    """``(batch,)`` row indices drawn with replacement, each row with probability proportional to its weight: the
    rows of the filtered batch, as many as the batch had."""
    weights = filtration_weights(scores, reweight_method, weight_pow)
    return torch.multinomial(weights, weights.numel(), replacement=True, generator=generator)
