"""Reductions over the kept entries of a tensor.

Masks keep where they are 1/True (``response_mask``: 1 = a real response token). Values at dropped positions are
never read arithmetically (``torch.where`` rather than multiplication), so padding holding garbage, even inf/NaN,
cannot leak into a result.
"""

from __future__ import annotations

from typing import Callable

import torch

# Sums a tensor over every part of a batch that is split over data-parallel ranks, on each rank alike (an all-reduce;
# the trainer's RankGroup.sum_tensor). Statistics "over the batch" use it so that every rank gets the whole batch's.
BatchSum = Callable[[torch.Tensor], torch.Tensor]


def masked_fill_zero(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``values`` where ``mask`` keeps, exactly 0 elsewhere. Same shape as ``values``."""
    return torch.where(mask.bool(), values, torch.zeros((), dtype=values.dtype, device=values.device))


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of kept entries, over all entries (``dim=None``) or along ``dim``."""
    kept = masked_fill_zero(values, mask)
    return kept.sum() if dim is None else kept.sum(dim=dim)


def masked_count(mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Number of kept entries (int64)."""
    m = mask.bool()
    return m.sum() if dim is None else m.sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of kept entries; 0 where nothing is kept (instead of NaN)."""
    count = masked_count(mask, dim).clamp(min=1).to(values.dtype)
    return masked_sum(values, mask, dim) / count


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of all kept entries (scalar). Unbiased (n-1) by default; with a single kept entry it is 0."""
    count = masked_count(mask)
    mean = masked_mean(values, mask)
    sq = masked_sum((values - mean) ** 2, mask)
    denom = (count - 1) if unbiased else count
    return sq / denom.clamp(min=1).to(values.dtype)


def masked_moments(
    values: torch.Tensor, mask: torch.Tensor, batch_sum: BatchSum | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, unbiased variance) of the kept entries, float64 scalars; with a single kept entry the variance is 0.

    ``batch_sum``: where ``values`` is one rank's part of a batch, the whole batch's (two all-reduces: count and sum,
    then the squared deviations), as verl computes them on its driver over the undivided batch; None: this tensor's.
    """
    wide = values.double()
    total = batch_sum if batch_sum is not None else (lambda t: t)
    count, kept_sum = total(torch.stack([masked_count(mask).to(wide.dtype), masked_sum(wide, mask)]))
    mean = kept_sum / count.clamp(min=1)
    squares = total(masked_sum((wide - mean) ** 2, mask).reshape(1))[0]
    return mean, squares / (count - 1).clamp(min=1)  # unbiased, as masked_var


def masked_whiten(
    values: torch.Tensor,
    mask: torch.Tensor,
    shift_mean: bool = True,
    eps: float = 1e-8,
    batch_sum: BatchSum | None = None,
) -> torch.Tensor:
    """Normalise kept entries to zero mean and unit (unbiased) variance over the whole tensor; 0 where dropped.

    With ``shift_mean=False`` the mean is added back (only the scale changes). ``batch_sum``: the whole batch's mean
    and variance where ``values`` is one rank's part of it (``masked_moments``).
    """
    # in float64: padding changes the order of the reductions, which in float32 moved results by a few ulps (3.9e-6
    # on REINFORCE++ returns), so the same kept entries gave different advantages with and without padding
    wide = values.double()
    mean, var = masked_moments(wide, mask, batch_sum)
    whitened = (wide - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return masked_fill_zero(whitened.to(values.dtype), mask)
